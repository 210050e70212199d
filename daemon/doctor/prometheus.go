package doctor

import (
	"context"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/redact"
)

// Prometheus asks the Prometheus of blockers.prometheus for its alerts
// (the ALERTS series, through the query API) as the daemon does,
// credential files and CA included. One that cannot be
// asked fails: the daemon would hold back every reboot. The URL shows
// redacted, in the errors too.
func Prometheus(ctx context.Context, a *block.Alerts) Finding {
	const check = "prometheus"
	reason, err := a.Check(ctx)
	switch {
	case err != nil:
		return finding(Fail, check, "%v; until it answers, every reboot waits", err)
	case reason != "":
		return finding(OK, check, "Prometheus at %s answers the query for ALERTS; it holds a reboot back now: %s", redact.URL(a.URL), reason)
	}
	return finding(OK, check, "Prometheus at %s answers the query for ALERTS; no alert holds a reboot back now", redact.URL(a.URL))
}
