package daemon

// The plan `kured-host run` prints at start.

import (
	"fmt"
	"strings"

	"github.com/kured-host/kured-host/daemon/config"
)

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
	add("slots: %s (or the strictest limit another node publishes)", limitsText(c.Lock))
	var blockers []string
	if n := len(c.Blockers.PodSelectors); n > 0 {
		blockers = append(blockers, fmt.Sprintf("%d pod selector(s)", n))
	}
	if c.Blockers.Inhibitors {
		blockers = append(blockers, "logind shutdown inhibitors")
	}
	if u := c.Blockers.Prometheus.URL; u.URL() != nil {
		blockers = append(blockers, "alerts in "+u.String()) // redacted
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
	health := ""
	if len(c.Health.Command) > 0 {
		health = fmt.Sprintf(" and %q to pass", strings.Join(c.Health.Command, " "))
	}
	add("after the reboot: wait for the kubelet to report this boot Ready%s, uncordon, hold the slot %s more, release", health, c.Lock.ReleaseDelay)
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
