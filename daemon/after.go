package daemon

// Holding a slot in a new boot: the reboot happened; resume and release.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/notify"
)

// recordBack: the boot ID changed, so the reboot happened. It records
// that in the claim (rebooted), once, and how long the machine was away.
// After any boot, planned or not, in any phase (the release delay
// included), the slot is then freed only once the kubelet reports this
// boot Ready (resume, release): a second, unplanned reboot starts that
// wait over.
func (d *Daemon) recordBack(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("rebooted")
	// The claim's last write before the reboot was the request.
	down := d.Now().Sub(c.Updated)
	log.Info("back after the reboot", "previous_boot", c.BootID, "since_reboot_requested", down.Round(time.Second))
	if d.Metrics != nil && c.Phase == claim.PhaseRebooting && down > 0 {
		d.Metrics.RebootDuration.Observe(down.Seconds())
	}
	if _, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseRebooted }); err != nil {
		return err
	}
	d.event(ctx, log, "Normal", ReasonRebooted, fmt.Sprintf("Rebooted: back %s after asking (boot %.8s before)", down.Round(time.Second), c.BootID))
	return nil
}

// resume waits until the node is healthy in this boot, then (once per
// reboot, in phase rebooted) puts it back: kured's mark, the uncordon if
// kured-host cordoned, the notification. With no release delay the
// uncordon and the mark are left to the release, which makes them in its
// own write.
func (d *Daemon) resume(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("rebooted")
	if err := d.waitHealthy(ctx, log); err != nil {
		return err
	}
	if c.Phase != claim.PhaseRebooted || d.uncordonsOnRelease(c) {
		return nil
	}
	if d.mark(ctx, log, "reboot finished", Marker.Finished) {
		d.inProgress = markClear
	}
	if !d.cordonedByUs(c) {
		// Unschedulable before kured-host cordoned: it stays so, and
		// the uncordon message would say otherwise.
		return nil
	}
	if err := d.uncordon(ctx, log, uncordonedWhy); err != nil {
		return err
	}
	d.message(ctx, notify.Uncordon, "")
	return nil
}

const uncordonedWhy = "Uncordoned after the reboot"

// uncordonsOnRelease: the release both frees the slot and uncordons, in
// one write, for a node kured-host cordoned, still to be put back (phase
// rebooted), with no release delay (with one, the node is back in service
// while the slot is held).
func (d *Daemon) uncordonsOnRelease(c claim.Claim) bool {
	return c.Phase == claim.PhaseRebooted && d.cordonedByUs(c) && d.Config.Lock.ReleaseDelay.Std() <= 0
}

// release frees the slot after the release delay, whose end
// lock.ReleaseAfter writes into the claim first: a restart waits only
// what is left of it.
func (d *Daemon) release(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	if d.uncordonsOnRelease(c) {
		var finished marks.Change
		if d.Marks != nil {
			finished = d.Marks.Finished()
		}
		if err := d.Lock.ReleaseUncordoned(ctx, finished); err != nil {
			return err
		}
		if d.Lock.Annotation(drain.CordonAnnotation) != "" {
			// The claim was removed by someone else first: the write
			// did not land, the next step undoes the cordon, and the
			// mark is written apart.
			if d.mark(ctx, log, "reboot finished", Marker.Finished) {
				d.inProgress = markClear
			}
			return nil
		}
		if d.Marks != nil {
			d.inProgress = markClear
		}
		log.Info("uncordoned")
		d.message(ctx, notify.Uncordon, "")
		return d.released(ctx, log, uncordonedWhy+"; reboot done, reboot slot released")
	}
	if delay := d.Config.Lock.ReleaseDelay.Std(); delay > 0 {
		d.setManagerStatus(fmt.Sprintf("rebooted; holding the slot for the release delay (%s)", delay))
	}
	if err := d.Lock.ReleaseAfter(ctx, d.Config.Lock.ReleaseDelay.Std()); err != nil {
		return err
	}
	return d.released(ctx, log, "Reboot done; reboot slot released")
}

func (d *Daemon) released(ctx context.Context, log *slog.Logger, why string) error {
	log.Info("reboot done; slot released")
	d.event(ctx, log, "Normal", ReasonSlotReleased, why)
	d.setStateMetric("idle")
	d.setManagerStatus("idle: rebooted")
	return nil
}

// waitHealthy waits until the Node is Ready in this boot and the health
// command (if any) passes, reporting once if it takes longer than
// health.timeout. The slot stays held meanwhile. It looks again at each
// change of the Node, and runs the health command every healthEvery.
// healthEvery is how often the wait after the boot runs the health
// command, and looks at the Node when nothing changes.
const healthEvery = 2 * time.Second

func (d *Daemon) waitHealthy(ctx context.Context, log *slog.Logger) error {
	began := d.Now()
	reported := false
	last := ""
	w := d.Ready()
	defer w.Stop()
	var checked time.Time // when the health command last ran
	for {
		ready, why, err := w.Next(ctx, healthEvery)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err != nil {
			log.Warn("cannot read the node's Ready condition", "err", err)
			why = "cannot read the Node"
		}
		healthy := ready
		if ready && (d.Health != nil || len(d.Config.Health.Command) > 0) {
			// Not more often than healthEvery, however often the Node
			// changes.
			if err := sleep(ctx, healthEvery-d.Now().Sub(checked)); err != nil {
				return err
			}
			healthy, why = d.health(ctx)
			checked = d.Now()
		}
		if healthy {
			return nil
		}
		d.setManagerStatus("rebooted; waiting: " + why)
		if why != last {
			log.Info("rebooted; keeping the slot until the node is healthy", "why", why)
			last = why
		}
		if !reported && d.Now().Sub(began) > d.Config.Health.Timeout.Std() {
			waited := d.Now().Sub(began).Round(time.Second)
			log.Error("not healthy long after the reboot; keeping the slot", "waited", waited, "why", why)
			d.countError("health")
			d.event(ctx, log, "Warning", ReasonHealthCheckFailed, fmt.Sprintf("Not healthy %s after the reboot, keeping the slot until it is: %s", waited, why))
			d.message(ctx, notify.Failure, fmt.Sprintf("not healthy %s after the reboot: %s", waited, why))
			reported = true
		}
	}
}

// health runs the health check once. One run may take at most
// health.timeout, the time the node may take to be healthy after the
// boot: a run still going then is killed and counts as not healthy.
func (d *Daemon) health(ctx context.Context) (bool, string) {
	check := d.Health
	if check == nil {
		check = HealthCommand(d.Config.Health.Command)
	}
	if err := check(ctx, d.Config.Health.Timeout.Std()); err != nil {
		return false, "health " + err.Error()
	}
	return true, ""
}

// HealthCommand is the health check of health.command: one run of argv
// (host.Command: its process group killed after timeout, a process it
// leaves behind not waited for, its output bounded and escaped).
func HealthCommand(argv []string) func(ctx context.Context, timeout time.Duration) error {
	return func(ctx context.Context, timeout time.Duration) error {
		_, err := host.Command{Argv: argv, Timeout: timeout}.Run(ctx)
		return err
	}
}
