package daemon

// The cluster's settings: the lock's limits, the window and the blockers
// an operator sets for every node at once (kured-host settings apply),
// under what each host's files set.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/kured-host/kured-host/daemon/config"
)

// SettingsReader reads the cluster's settings (daemon/steer).
type SettingsReader interface {
	Settings(ctx context.Context) (string, error)
}

// applySettings reads the cluster's settings and, if they changed since
// the last look, applies them: the configuration again, with them under
// the host's files. It runs only while the node has no claim, right
// before it joins: a claim publishes the limits it was made with. A
// setting that cannot be read or is bad changes nothing: the node keeps
// what it had, and says why.
func (d *Daemon) applySettings(ctx context.Context, log *slog.Logger) {
	if d.Settings == nil || d.Reload == nil {
		return
	}
	text, err := d.Settings.Settings(ctx)
	if err != nil {
		// The pause, in the same object, cannot be read either: the
		// blockers hold the reboot back and report it.
		log.Debug("cannot read the cluster's settings; keeping the current ones", "err", err)
		return
	}
	if text == d.settings.applied {
		return
	}
	cfg, err := d.Reload(text)
	if err != nil {
		d.countError("settings")
		// Reported once for each settings text and error: a host file
		// fixed, or broken again, is told again.
		if seen := text + "\x00" + err.Error(); seen != d.settings.refused {
			d.settings.refused = seen
			d.reportRefused(ctx, log, err)
		}
		return
	}
	before := settingsText(d.Config)
	d.Config = cfg
	d.settings.applied, d.settings.refused = text, ""
	d.Lock.SetLimits(cfg.Lock.Limits())
	if d.BlockersFor != nil {
		d.Blockers = d.BlockersFor(cfg)
	}
	if after := settingsText(cfg); after != before {
		log.Info("the cluster's settings changed", "now", after, "was", before)
		d.event(ctx, log, "Normal", ReasonSettingsApplied, "The cluster's settings changed: "+after+" (was: "+before+")")
	}
}

// reportRefused tells why the configuration could not be loaded again
// with the cluster's settings: the settings themselves, or, when no
// problem is theirs, this host's own files (changed since the daemon
// started), which the reload reads again.
func (d *Daemon) reportRefused(ctx context.Context, log *slog.Logger, err error) {
	if !clusterProblem(err) {
		log.Error("this host's configuration files are no longer valid; keeping the configuration loaded before", "err", err)
		d.event(ctx, log, "Warning", ReasonConfigInvalid, "This host's configuration files, read again for the cluster's settings, are not valid; keeping the configuration loaded before: "+firstLines(err.Error(), 3))
		return
	}
	log.Error("the cluster's settings are not valid; keeping the current ones", "err", err)
	d.event(ctx, log, "Warning", ReasonSettingsInvalid, "The cluster's settings are not valid; keeping the current ones: "+firstLines(err.Error(), 3))
}

// clusterProblem reports whether err names a problem of the cluster's
// settings (or is not a configuration error at all).
func clusterProblem(err error) bool {
	var ce *config.Error
	if !errors.As(err, &ce) {
		return true
	}
	return slices.ContainsFunc(ce.Problems, func(p config.Problem) bool { return p.File == config.ClusterSource })
}

// settingsText is what the cluster's settings may change, in words.
func settingsText(c config.Config) string {
	s := limitsText(c.Lock) + "; window " + describeWindow(c.Window)
	kinds := blockerKinds(c)
	if len(kinds) == 0 {
		return s + "; no blockers"
	}
	return s + "; blockers: " + strings.Join(kinds, ", ")
}

// blockerKinds names the blockers a configuration turns on.
func blockerKinds(c config.Config) []string {
	var out []string
	if len(c.Blockers.PodSelectors) > 0 {
		out = append(out, fmt.Sprintf("pods (%d selectors)", len(c.Blockers.PodSelectors)))
	}
	if c.Blockers.Prometheus.URL.URL() != nil {
		out = append(out, "Prometheus alerts")
	}
	if c.Blockers.Inhibitors {
		out = append(out, "logind inhibitors")
	}
	return out
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " ")
}
