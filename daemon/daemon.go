// Package daemon is `kured-host run`: the reboot cycle on one node, driven
// by the phase persisted in the node's claim. So far it loads the
// configuration, says what it will do, tells systemd it is ready and waits
// for SIGTERM; the cycle itself (sentinel, blockers, slot, drain, reboot,
// resume) comes with the packages that implement each step.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/kured-host/kured-host/daemon/config"
)

// Notifier tells the service manager about the daemon's state.
type Notifier interface {
	Notify(state string) error
}

// Daemon is one node's kured-host.
type Daemon struct {
	Config config.Config
	Log    *slog.Logger
	Notify Notifier
}

// Run runs until ctx is cancelled (SIGTERM); cancellation is a clean stop,
// not an error.
func (d *Daemon) Run(ctx context.Context) error {
	log := d.Log.With("component", "daemon")
	for _, line := range Plan(d.Config) {
		log.Info(line)
	}
	status := "idle: configuration loaded; the reboot cycle is not part of this build yet"
	if err := d.Notify.Notify("READY=1\nSTATUS=" + status); err != nil {
		log.Warn("cannot notify systemd", "err", err)
	}
	log.Info("ready")
	<-ctx.Done()
	log.Info("stopping", "reason", context.Cause(ctx))
	if err := d.Notify.Notify("STOPPING=1"); err != nil {
		log.Warn("cannot notify systemd", "err", err)
	}
	return nil
}

// Plan describes, one line per step, what the configuration makes the
// daemon do.
func Plan(c config.Config) []string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	if len(c.Sentinel.Command) > 0 {
		add("reboot needed when %q exits with %v (every %s, timeout %s)",
			strings.Join(c.Sentinel.Command, " "), c.Sentinel.RebootExitCodes, c.Sentinel.Period, c.Sentinel.CommandTimeout)
	} else {
		add("reboot needed when %s exists (inotify, re-checked every %s)", c.Sentinel.File, c.Sentinel.Period)
	}
	add("reboots may start %s", describeWindow(c.Window))
	limits := fmt.Sprintf("at most %d node(s) of the cluster at once", c.Lock.Concurrency)
	for _, g := range c.Lock.Groups {
		limits += fmt.Sprintf(", %d per %s", g.Max, g.Label)
	}
	add("slots: %s (or the strictest limit another node publishes)", limits)
	var blockers []string
	if n := len(c.Blockers.PodSelectors); n > 0 {
		blockers = append(blockers, fmt.Sprintf("%d pod selector(s)", n))
	}
	if c.Blockers.Inhibitors {
		blockers = append(blockers, "logind shutdown inhibitors")
	}
	if u := c.Blockers.Prometheus.URL.URL(); u != nil {
		blockers = append(blockers, "alerts in "+u.String())
	}
	if len(blockers) > 0 {
		add("blocked by %s", strings.Join(blockers, ", "))
	}
	drain := "drain first"
	if c.Drain.Timeout > 0 {
		drain += fmt.Sprintf(" (timeout %s", c.Drain.Timeout)
		if c.Drain.ForceReboot {
			drain += ", then reboot anyway"
		}
		drain += ")"
	}
	reboot := "through logind"
	if c.Reboot.Method == config.RebootCommand {
		reboot = fmt.Sprintf("with %q", strings.Join(c.Reboot.Command, " "))
	}
	add("%s, then reboot %s", drain, reboot)
	add("after the reboot: wait for Ready, uncordon, hold the slot %s more, release", c.Lock.ReleaseDelay)
	return lines
}

func describeWindow(w config.WindowConfig) string {
	if len(w.Days) == 7 && w.Start == 0 && w.End == config.EndOfDay {
		return "at any time"
	}
	days := make([]string, len(w.Days))
	for i, d := range w.Days {
		days[i] = d.String()
	}
	return fmt.Sprintf("on %s from %s to %s %s", strings.Join(days, ","), w.Start, w.End, w.TimeZone)
}
