package daemon

// The ways out of the cycle other than a release after a reboot: an
// abort, a lost claim, an unreadable one.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kured-host/kured-host/daemon/alarm"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/cycle"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/notify"
)

// removeUnreadable: the own claim cannot be read (garbage, another
// version, a label and an annotation that disagree: an admin's edit of
// one of them), and it is waiting or entering: it stands for nothing this
// daemon has done, so it is removed and the node starts over.
func (d *Daemon) removeUnreadable(ctx context.Context, log *slog.Logger, f cycle.Facts) error {
	why := d.unreadableWhy(f)
	log.Warn("own claim cannot be read; removing it and starting over", "state", string(f.State), "err", why)
	d.event(ctx, log, "Warning", alarm.ReasonUnreadableClaim, "The claim on this node cannot be read ("+firstLine(why.Error())+"); it was "+string(f.State)+", so it was removed and the node starts over")
	return d.Lock.Release(ctx)
}

// keepUnreadable: the own claim cannot be read, or is in a state this
// daemon does not write, and may stand for a cordon, a drain, a reboot
// asked for: the daemon never guesses what it was, never releases it nor
// uncordons on it, and says so until an admin fixes or removes it; the
// other nodes count it as holding meanwhile. (Removed, a cordon of
// kured-host's is undone from its annotation.)
func (d *Daemon) keepUnreadable(ctx context.Context, log *slog.Logger, f cycle.Facts) error {
	why := d.unreadableWhy(f)
	d.setStateMetric("unreadable")
	status := "own claim cannot be read; keeping it until an admin fixes or removes it: " + firstLine(why.Error())
	d.mu.Lock()
	same := d.managerStatus == status
	d.mu.Unlock()
	if !same {
		log.Error("own claim cannot be read; leaving it alone (no release, no uncordon) until an admin fixes or removes it", "state", string(f.State), "err", why)
		d.event(ctx, log, "Warning", alarm.ReasonUnreadableClaim, "The claim on this node cannot be read ("+firstLine(why.Error())+"); it counts as holding a reboot slot. kured-host leaves it alone: fix or remove it (kubectl label/annotate node "+d.Node+" "+claim.Label+"-)")
	}
	d.setManagerStatus(status)
	if err := d.waitChange(ctx, d.recheck()); err != nil {
		return err
	}
	_, _, err := d.Lock.Own(ctx)
	if err != nil && !errors.Is(err, claim.ErrUnparsable) {
		return err
	}
	return nil
}

// unreadableWhy is why the own claim cannot be used: the lock's parse
// error, or a state this daemon does not write.
func (d *Daemon) unreadableWhy(f cycle.Facts) error {
	if err := d.Lock.Unreadable(); err != nil {
		return err
	}
	return fmt.Errorf("its label is %q, a state this daemon does not write", f.State)
}

// abort gives the slot back after a failed drain: record the abort,
// uncordon if we cordoned, release, and wait before trying again.
func (d *Daemon) abort(ctx context.Context, log *slog.Logger, c claim.Claim, cause error) error {
	log.Error("drain failed; uncordoning and giving the slot back", "err", cause)
	d.event(ctx, log, "Warning", ReasonDrainFailed, "Drain failed, node uncordoned and slot given back: "+firstLine(cause.Error()))
	d.message(ctx, notify.Failure, "drain failed: "+firstLine(cause.Error()))
	d.setManagerStatus("drain failed: " + firstLine(cause.Error()))
	if err := d.finishAbort(ctx, log, c); err != nil {
		return err
	}
	wait := min(d.Config.Sentinel.Period.Std(), 5*time.Minute)
	log.Info("trying again later", "in", wait)
	return sleep(ctx, wait)
}

// finishAbort records the abort before it uncordons: a step that fails
// after the uncordon (its reply lost, a restart) then resumes the abort,
// never the drain of a node that is schedulable again.
func (d *Daemon) finishAbort(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	if c.Phase != claim.PhaseAborted {
		if _, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseAborted }); err != nil {
			return d.lost(ctx, log, c, err)
		}
	}
	if d.cordonedByUs(c) {
		if err := d.uncordon(ctx, log, "Uncordoned: the reboot was given up"); err != nil {
			return err
		}
	}
	d.mark(ctx, log, "reboot given up", Marker.GaveUp)
	if err := d.Lock.Release(ctx); err != nil {
		return err
	}
	d.holding = nil
	d.event(ctx, log, "Normal", ReasonSlotReleased, "Gave the reboot slot back without rebooting")
	return nil
}

// lostIf handles an error from a claim write.
func (d *Daemon) lostIf(ctx context.Context, log *slog.Logger, c claim.Claim, err error) error {
	if err == nil {
		return nil
	}
	return d.lost(ctx, log, c, err)
}

// lost handles an error that may say the claim is gone.
func (d *Daemon) lost(ctx context.Context, log *slog.Logger, c claim.Claim, err error) error {
	if !errors.Is(err, lock.ErrLost) {
		return err
	}
	return d.lostPath(ctx, log, c, err.Error())
}

// lostPath: the claim is gone before the reboot. Stop, put the node back
// as it was (uncordon if kured-host cordoned it), report, and start over;
// a lost claim is never recreated as holding. A holding claim that is
// still there but is not the one this daemon took (its times rewritten
// by someone else) is not resumed either: it is given back as an abort,
// recorded before the uncordon, so that the next step cannot take it up
// again on a node that is schedulable by then.
func (d *Daemon) lostPath(ctx context.Context, log *slog.Logger, c claim.Claim, why string) error {
	d.holding = nil
	log.Warn("the slot is no longer ours before the reboot; stopping and starting over", "why", why)
	d.event(ctx, log, "Warning", ReasonSlotLost, "The reboot slot was taken away before the reboot (claim removed or changed by someone else); starting over")
	if _, state := d.Lock.Known(); state == claim.Holding && d.Lock.Unreadable() == nil {
		changed, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseAborted })
		switch {
		case err == nil:
			return d.finishAbort(ctx, log, changed)
		case !errors.Is(err, lock.ErrLost):
			return err
		}
	}
	if c.Cordoned || d.Lock.Annotation(drain.CordonAnnotation) != "" {
		if err := d.uncordon(ctx, log, "Uncordoned: the reboot slot was lost"); err != nil {
			return err
		}
	}
	d.mark(ctx, log, "reboot given up", Marker.GaveUp)
	_, _, rerr := d.Lock.Own(ctx)
	if rerr != nil && !errors.Is(rerr, claim.ErrUnparsable) {
		return rerr
	}
	return nil
}

// cordonedByUs reports whether kured-host cordoned the node: the claim
// says so, or the cordon's own annotation does.
func (d *Daemon) cordonedByUs(c claim.Claim) bool {
	return c.Cordoned || d.Lock.Annotation(drain.CordonAnnotation) != ""
}

// uncordon makes the node schedulable again and says why.
func (d *Daemon) uncordon(ctx context.Context, log *slog.Logger, why string) error {
	if err := d.Drainer.Uncordon(ctx); err != nil {
		return err
	}
	log.Info("uncordoned")
	d.event(ctx, log, "Normal", ReasonUncordoned, why)
	return nil
}
