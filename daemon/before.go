package daemon

// Holding a slot in the boot that took it: cordon, drain, record the
// reboot, ask for it.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/notify"
	"github.com/kured-host/kured-host/daemon/steer"
)

// lastLook is the blockers as the look before the cordon asks them: the
// operator's orders fresh (FreshOrders) in place of those of their kinds,
// as the look before an announce reads them.
func (d *Daemon) lastLook() []block.Blocker {
	if len(d.FreshOrders) == 0 {
		return d.Blockers
	}
	return WithFresh(d.Blockers, d.FreshOrders)
}

// cordon: a slot taken by an earlier version, which committed before it
// cordoned (this one cordons in the commit's own write: lock.Take). The
// blockers are checked again right before the first disruptive step
// (blocked: the slot is given back); then the cordon is recorded in the
// claim and made in one conditional write (lock.Lock.Cordon), which also
// confirms the claim. With no drain.delay the drain starts at once: the
// same write records phase draining and carries kured's marks, and
// startDrain's step is skipped.
func (d *Daemon) cordon(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("draining")
	d.setQueuePositionMetric(-1)
	blocked := block.Check(ctx, d.lastLook())
	d.setBlockersMetric(blocked)
	d.notePaused(ctx, log, blocked)
	if len(blocked) > 0 {
		d.reportBlocked(ctx, log, blocked)
		return d.giveBack(ctx, log, c, block.Summary(blocked))
	}
	d.setManagerStatus("holding a reboot slot: cordoning")
	phase, with, marked := claim.PhaseCordoned, marks.Change{}, func() {}
	if d.Config.Drain.Delay.Std() <= 0 {
		phase = claim.PhaseDraining
		with, marked = d.startedMarks()
	}
	was, err := d.Lock.Cordon(ctx, phase, with)
	if no := (lock.Refusal{}); errors.As(err, &no) {
		// Held on the version the cordon was to be written on: set
		// since the last look, which read the watch.
		held := []block.Blocked{{Kind: steer.KindHeld, Reason: no.Error()}}
		d.reportBlocked(ctx, log, held)
		return d.giveBack(ctx, log, c, block.Summary(held))
	}
	if err != nil {
		return d.lost(ctx, log, c, err)
	}
	marked()
	took := cmp.Or(d.took, "Holds a reboot slot")
	d.took = ""
	d.reportCordon(ctx, log, took, was)
	if phase == claim.PhaseDraining {
		d.message(ctx, notify.Drain, "")
	}
	return nil
}

// reportCordon tells of the slot taken (took) and its cordon, or that the
// node was unschedulable already (was).
func (d *Daemon) reportCordon(ctx context.Context, log *slog.Logger, took string, was bool) {
	if was {
		d.event(ctx, log, "Normal", ReasonSlotAcquired, took+"; already unschedulable, it will stay so after the reboot")
		return
	}
	log.Info("cordoned")
	d.event(ctx, log, "Normal", ReasonSlotAcquired, took+"; cordoned for the reboot")
}

// giveBack gives the slot just taken back, before the cordon: blocked
// says by what.
func (d *Daemon) giveBack(ctx context.Context, log *slog.Logger, c claim.Claim, blocked string) error {
	log.Info("blocked after taking the slot; giving it back", "blocked_by", blocked)
	// Recorded as an abort first: a slot released in the boot it was
	// taken in is an abort, whoever reads the claim's history.
	if _, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseAborted }); err != nil {
		return d.lost(ctx, log, c, err)
	}
	if err := d.Lock.Release(ctx); err != nil {
		return err
	}
	d.holding = nil
	d.event(ctx, log, "Normal", ReasonSlotReleased, "Gave the reboot slot back before cordoning: blocked by "+blocked)
	return nil
}

// startedMarks are kured's marks of a drain that starts: the pre-reboot
// labels, and the in-progress mark if this daemon has not written it (it
// started with a slot and could not write it then); done records them
// written.
func (d *Daemon) startedMarks() (marks.Change, func()) {
	if d.Marks == nil {
		return marks.Change{}, func() {}
	}
	with, done := d.neededMark()
	return with.Merge(d.Marks.Started()), done
}

// startDrain: cordoned. It makes a cordon a restart may have cut short,
// marks the node (kured's annotations), sends the drain message, waits
// drain.delay and records the drain.
func (d *Daemon) startDrain(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("draining")
	if c.Cordoned && d.Lock.Annotation(drain.CordonAnnotation) == "" {
		// Recorded, but the Node as last read has no cordon of ours: a
		// claim an earlier version recorded before its cordon, and a
		// restart in between (this version cordons in the record's own
		// write). The cordon is a disruptive step, confirmed first.
		if _, err := d.Lock.Confirm(ctx); err != nil {
			return d.lost(ctx, log, c, err)
		}
		if err := d.Drainer.Cordon(ctx); err != nil {
			return err
		}
	}
	// Here rather than at the cordon so that a restart in between
	// still marks the node: these writes are idempotent. The in-progress
	// mark is there since the need (idle), unless this daemon started
	// with a slot and it could not be written then.
	d.markNeeded(ctx, log, nil)
	d.mark(ctx, log, "reboot started", Marker.Started)
	d.message(ctx, notify.Drain, "")
	if delay := d.Config.Drain.Delay.Std(); delay > 0 {
		d.setManagerStatus(fmt.Sprintf("holding a reboot slot: draining in %s", delay))
		if err := sleep(ctx, delay); err != nil {
			return err
		}
	}
	_, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseDraining })
	return d.lostIf(ctx, log, c, err)
}

// drain evicts the pods, each eviction confirmed (so the drain needs no
// confirmation of its own: listing the pods disrupts nothing); a failed
// drain gives the slot back (abort) unless drain.force_reboot. With no
// reboot.delay the reboot's record (phase rebooting) is the next write,
// and stands for the drain's (cycle.Facts.Drained): phase drained is
// written only to span the delay.
func (d *Daemon) drain(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("draining")
	d.setManagerStatus("holding a reboot slot: draining")
	began := d.Now()
	if err := d.Drainer.Drain(ctx); err != nil {
		if ctx.Err() != nil {
			return err
		}
		if _, st := d.Lock.Known(); st != claim.Holding || d.Lock.Unreadable() != nil {
			// An eviction's confirmation found the slot gone.
			return d.lostPath(ctx, log, c, "the claim went away during the drain: "+firstLine(err.Error()))
		}
		d.drainTook("failed", began)
		d.countError("drain")
		if !d.Config.Drain.ForceReboot {
			return d.abort(ctx, log, c, err)
		}
		log.Warn("drain failed; rebooting anyway (drain.force_reboot)", "err", err)
		d.event(ctx, log, "Warning", ReasonDrainFailed, "Drain failed; rebooting anyway (drain.force_reboot): "+firstLine(err.Error()))
		d.message(ctx, notify.Failure, "drain failed, rebooting anyway: "+firstLine(err.Error()))
	} else {
		took := d.drainTook("ok", began)
		log.Info("drained", "took", took.Round(time.Millisecond))
		d.drained = took.Round(time.Second).String()
	}
	if d.Config.Reboot.Delay.Std() <= 0 && c.Acquired != nil {
		// The next step, decided anew (the claim may have changed
		// under the drain), is the reboot's record.
		at := *c.Acquired
		d.drainedFor = &at
		return nil
	}
	_, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseDrained })
	return d.lostIf(ctx, log, c, err)
}

// requestReboot: drained. After reboot.delay, the reboot is recorded with
// this boot's ID, then asked for. The record is a conditional write: its
// success confirms the claim as a consistent GET would, later.
func (d *Daemon) requestReboot(ctx context.Context, log *slog.Logger, c claim.Claim, boot string) error {
	if c.Phase == claim.PhaseDrained {
		if delay := d.Config.Reboot.Delay.Std(); delay > 0 {
			d.setManagerStatus(fmt.Sprintf("holding a reboot slot: rebooting in %s", delay))
			if err := sleep(ctx, delay); err != nil {
				return err
			}
		}
	}
	if _, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase, c.BootID = claim.PhaseRebooting, boot }); err != nil {
		return d.lost(ctx, log, c, err)
	}
	return d.reboot(ctx, log, c, boot)
}

// reboot asks for the reboot, and again if the machine is still up after
// reboot.timeout, once the claim is confirmed again: the slot may have
// been taken away while the machine did not go down.
func (d *Daemon) reboot(ctx context.Context, log *slog.Logger, c claim.Claim, boot string) error {
	d.setStateMetric("rebooting")
	d.setManagerStatus("holding a reboot slot: rebooting")
	log.Info("rebooting")
	how := fmt.Sprintf("(%s; boot %.8s)", d.rebootMethod(), boot)
	if d.drained != "" {
		d.event(ctx, log, "Normal", ReasonRebooting, "Drained in "+d.drained+"; rebooting "+how)
	} else {
		d.event(ctx, log, "Normal", ReasonRebooting, "Rebooting "+how)
	}
	d.drained = ""
	d.message(ctx, notify.Reboot, "")
	asked := d.Now()
	for {
		if err := d.Rebooter.Reboot(ctx); err != nil {
			if ctx.Err() == nil {
				d.countError("reboot")
				d.event(ctx, log, "Warning", ReasonRebootFailed, "The reboot was refused, trying again: "+firstLine(err.Error()))
				d.message(ctx, notify.Failure, "the reboot was refused: "+firstLine(err.Error()))
			}
			return fmt.Errorf("reboot: %w", err)
		}
		if err := sleep(ctx, d.Config.Reboot.Timeout.Std()); err != nil {
			return err
		}
		if _, err := d.Lock.Confirm(ctx); err != nil {
			return d.lost(ctx, log, c, err)
		}
		late := d.Now().Sub(asked).Round(time.Second)
		log.Error("still up after asking for a reboot; asking again", "asked", late)
		d.countError("reboot")
		d.event(ctx, log, "Warning", ReasonRebootOverdue, fmt.Sprintf("Still up %s after asking for a reboot; asking again", late))
		d.message(ctx, notify.Failure, fmt.Sprintf("still up %s after asking for a reboot", late))
		d.setManagerStatus(fmt.Sprintf("holding a reboot slot: reboot overdue (asked %s ago)", late))
	}
}

func (d *Daemon) rebootMethod() string {
	if d.Config.Reboot.Method == config.RebootCommand {
		return "command " + strings.Join(d.Config.Reboot.Command, " ")
	}
	return "systemd-logind"
}

// drainTook records a drain's duration.
func (d *Daemon) drainTook(result string, began time.Time) time.Duration {
	took := d.Now().Sub(began)
	if d.Metrics != nil {
		d.Metrics.DrainDuration.WithLabelValues(result).Observe(took.Seconds())
	}
	return took
}
