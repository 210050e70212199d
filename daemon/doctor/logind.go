package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/kured-host/kured-host/daemon/host"
)

// LogindClient is logind on a bus.
type LogindClient interface {
	// Present: org.freedesktop.login1 has an owner on the bus.
	Present(ctx context.Context) (bool, error)
	CanReboot(ctx context.Context) (string, error)
	Inhibitors(ctx context.Context) ([]host.Inhibitor, error)
	Close() error
}

var _ LogindClient = (*host.Logind)(nil)

// DialLogind connects to the bus at address ("" for the system bus:
// $DBUS_SYSTEM_BUS_ADDRESS or the standard socket).
func DialLogind(address string) func(ctx context.Context) (LogindClient, error) {
	return func(ctx context.Context) (LogindClient, error) {
		l, err := host.DialLogind(ctx, address)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// LogindUse is what the configuration needs logind for.
type LogindUse struct {
	Reboot     bool // reboot.method = "logind"
	Inhibitors bool // blockers.inhibitors
	// UID is the user check runs as: logind answers CanReboot for it.
	UID int
}

func (u LogindUse) String() string {
	var why []string
	if u.Reboot {
		why = append(why, `reboot.method = "logind"`)
	}
	if u.Inhibitors {
		why = append(why, "blockers.inhibitors = true")
	}
	return strings.Join(why, " and ")
}

// Logind checks that logind answers on the bus, and what for: whether it
// would reboot (CanReboot), and which inhibitors block a shutdown now.
func Logind(ctx context.Context, dial func(context.Context) (LogindClient, error), use LogindUse) Finding {
	const check = "logind"
	l, err := dial(ctx)
	if err != nil {
		return finding(Fail, check, "%v (needed for %s)", err, use)
	}
	defer l.Close()
	switch present, err := l.Present(ctx); {
	case err != nil:
		return finding(Fail, check, "%v (needed for %s)", err, use)
	case !present:
		return finding(Fail, check, "%s is not on the system bus: is systemd-logind running? (needed for %s)", host.LogindService, use)
	}
	level, said := OK, []string{host.LogindService + " is on the system bus"}
	if use.Reboot {
		answer, err := l.CanReboot(ctx)
		switch {
		case err != nil:
			return finding(Fail, check, "%v", err)
		case answer == "yes":
			said = append(said, "CanReboot: yes")
		case use.UID != 0:
			level = Warn
			said = append(said, fmt.Sprintf("CanReboot: %s for uid %d; the service runs as root: run check as root to know whether it may reboot", answer, use.UID))
		default:
			return finding(Fail, check, "CanReboot: %s, even as root: logind would refuse to reboot (reboot.method = \"logind\"); is polkit in the way?", answer)
		}
	}
	if use.Inhibitors {
		all, err := l.Inhibitors(ctx)
		if err != nil {
			return finding(Fail, check, "%v (needed for blockers.inhibitors)", err)
		}
		said = append(said, blocking(host.BlockingShutdown(all)))
	}
	return Finding{Level: level, Check: check, Message: strings.Join(said, "; ")}
}

func blocking(in []host.Inhibitor) string {
	if len(in) == 0 {
		return "no inhibitor blocks a shutdown now"
	}
	var who []string
	for _, i := range in {
		who = append(who, i.String())
	}
	what := fmt.Sprintf("%d inhibitors block", len(in))
	if len(in) == 1 {
		what = "an inhibitor blocks"
	}
	return fmt.Sprintf("%s a shutdown now (a reboot waits for it to go): %s", what, strings.Join(who, ", "))
}
