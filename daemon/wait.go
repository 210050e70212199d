package daemon

// No claim, or a waiting one: join the queue once a reboot is needed and
// nothing blocks it, take a slot, or leave the queue.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/notify"
	"github.com/kured-host/kured-host/daemon/steer"
)

func (d *Daemon) setNeeded(needed bool, err error, log *slog.Logger) {
	d.mu.Lock()
	changed := needed != d.needed || (err == nil) != (d.sentErr == nil)
	d.needed, d.sentErr = needed, err
	d.mu.Unlock()
	if d.Metrics != nil {
		v := 0.0
		if needed {
			v = 1
		}
		d.Metrics.RebootRequired.WithLabelValues(d.Node).Set(v)
	}
	if !changed {
		return
	}
	switch {
	case err != nil:
		log.Error("cannot tell whether a reboot is needed", "sentinel", d.Sentinel.String(), "err", err)
		d.countError("sentinel")
	case needed:
		log.Info("reboot needed", "sentinel", d.Sentinel.String())
	default:
		log.Info("no reboot needed", "sentinel", d.Sentinel.String())
	}
	d.wake()
}

func (d *Daemon) rebootNeeded() (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.needed, d.sentErr
}

// idle: join the queue once a reboot is needed and nothing blocks it.
func (d *Daemon) idle(ctx context.Context, log *slog.Logger) error {
	d.setStateMetric("idle")
	d.setQueuePositionMetric(-1)
	needed, err := d.rebootNeeded()
	switch {
	case err != nil:
		d.setManagerStatus("cannot tell whether a reboot is needed: " + firstLine(err.Error()))
		return d.waitChange(ctx, d.recheck())
	case !needed:
		d.toldNeeded = false
		d.markNotNeeded(ctx, log)
		d.setBlockersMetric(nil)
		d.setManagerStatus("idle: no reboot needed")
		return d.waitChange(ctx, time.Hour)
	}
	d.applySettings(ctx, log)
	why := "A reboot is needed: " + d.Sentinel.String()
	blocked := block.Check(ctx, d.Blockers)
	d.setBlockersMetric(blocked)
	d.notePaused(ctx, log, blocked)
	if len(blocked) > 0 {
		d.markNeeded(ctx, log, blocked)
		d.tellNeeded(ctx, log, ReasonRebootRequired, why)
		d.setStateMetric("blocked")
		d.reportBlocked(ctx, log, blocked)
		wait := d.recheck()
		if block.Failed(blocked) {
			// A check that could not be made is made again as soon as
			// a failed step is tried again: once an outage of the API
			// server ends, a node takes a free slot within the bound
			// docs/claims.md states ("No idle slot").
			wait = min(wait, stepRetryMax)
		}
		return d.waitChange(ctx, wait)
	}
	d.setManagerStatus("reboot needed: joining the queue")
	mark, marked := d.neededMark()
	if err := d.Lock.Join(ctx, mark); err != nil {
		return err
	}
	marked()
	queue := "the queue for a reboot slot (" + limitsText(d.Config.Lock) + ", or stricter limits published by other nodes)"
	if !d.tellNeeded(ctx, log, ReasonRebootRequired, why+"; joined "+queue) {
		d.event(ctx, log, "Normal", ReasonWaitingForSlot, "Joined "+queue)
	}
	d.showQueue(d.Lock.Status())
	return nil
}

// tellNeeded records RebootRequired once per need, and reports whether it
// did now: a node that joins the queue as soon as it needs a reboot says
// both in one Event.
func (d *Daemon) tellNeeded(ctx context.Context, log *slog.Logger, reason, message string) bool {
	if d.toldNeeded {
		return false
	}
	d.toldNeeded = true
	d.event(ctx, log, "Normal", reason, message)
	return true
}

func limitsText(c config.LockConfig) string {
	s := fmt.Sprintf("at most %d node(s) of the cluster at once", c.Concurrency)
	for _, g := range c.Groups {
		s += fmt.Sprintf(", %d per %s", g.Max, g.Label)
	}
	return s
}

func (d *Daemon) reportBlocked(ctx context.Context, log *slog.Logger, blocked []block.Blocked) {
	s := block.Summary(blocked)
	d.mu.Lock()
	same := d.managerStatus == "reboot needed; waiting: "+s
	d.mu.Unlock()
	if !same {
		log.Info("reboot needed but blocked", "blocked_by", s)
		d.event(ctx, log, "Normal", ReasonBlocked, "Reboot needed but waiting: "+s)
	}
	d.setManagerStatus("reboot needed; waiting: " + s)
}

// acquire takes a slot, leaving the queue if the reboot is no longer
// needed or becomes blocked while waiting (before the first try, the
// cycle's rule: cycle.LeaveQueue).
func (d *Daemon) acquire(ctx context.Context, log *slog.Logger) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	take, marked := d.take()
	type taken struct {
		c   claim.Claim
		err error
	}
	done := make(chan taken, 1)
	go func() {
		c, err := d.Lock.Acquire(actx, take)
		done <- taken{c, err}
	}()
	period := min(d.recheck(), 5*time.Second)
	tick := time.NewTicker(period)
	defer tick.Stop()
	looks := looksWhileWaiting{period: period, last: d.Now()}
	for {
		select {
		case t := <-done:
			if t.err == nil {
				marked()
				d.tookSlot(ctx, log, t.c)
			}
			return d.acquireEnded(ctx, log, t.err)
		case <-d.Lock.StatusChanged():
			d.showQueue(d.Lock.Status())
			continue
		case <-d.changed:
			// The sentinel or the orders changed (a pause lifted): look
			// now, not at the next recheck.
			looks.last = time.Time{}
		case <-tick.C:
		}
		d.showQueue(d.Lock.Status())
		stay, blocked := d.lookWhileWaiting(ctx, log, &looks)
		if stay {
			continue
		}
		// Leave the queue: stop acquiring, then withdraw if still waiting.
		cancel()
		if t := <-done; t.err == nil {
			// Taken as the look decided to leave: the slot is given
			// back and the commit's cordon undone (the abort's step).
			marked()
			d.tookSlot(ctx, log, t.c)
			_, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseAborted })
			return d.lostIf(ctx, log, t.c, err)
		}
		return d.leaveQueue(ctx, log, blocked)
	}
}

// take is what the commit does besides taking the slot (lock.Take): it
// cordons, and with no drain.delay records phase draining and carries
// kured's marks of a drain that starts (marked records them written,
// once the commit has). Its Check is the last look before the commit
// and its cordon: the blockers, the operator's orders read fresh.
func (d *Daemon) take() (lock.Take, func()) {
	t := lock.Take{Phase: claim.PhaseCordoned, Check: MayGo(d.lastLook())}
	marked := func() {}
	if d.Config.Drain.Delay.Std() <= 0 {
		t.Phase = claim.PhaseDraining
		t.With, marked = d.startedMarks()
	}
	return t, marked
}

// tookSlot reports the slot taken, how long the node waited for it, and
// the cordon the commit made with it. A claim an earlier version took,
// not yet cordoned, leaves that to the cordon step.
func (d *Daemon) tookSlot(ctx context.Context, log *slog.Logger, c claim.Claim) {
	waited := d.Now().Sub(c.Since)
	if d.Metrics != nil {
		d.Metrics.SlotWait.Observe(max(waited, 0).Seconds())
	}
	took := fmt.Sprintf("Took a reboot slot after waiting %s", waited.Round(time.Second))
	if c.Phase == claim.PhaseAcquired {
		d.took = took
		return
	}
	d.setQueuePositionMetric(-1)
	d.reportCordon(ctx, log, took, c.WasUnschedulable)
	if c.Phase == claim.PhaseDraining {
		d.message(ctx, notify.Drain, "")
	}
}

// acquireEnded: the lock's Acquire returned err.
func (d *Daemon) acquireEnded(ctx context.Context, log *slog.Logger, err error) error {
	switch {
	case errors.Is(err, lock.ErrLost) || errors.Is(err, lock.ErrNotJoined):
		log.Warn("the claim went away while waiting; starting over", "err", err)
		_, _, err = d.Lock.Own(ctx)
	case errors.Is(err, lock.ErrRefused):
		// Its turn, but paused or held: the blockers say which.
		return d.refused(ctx, log)
	}
	return err
}

// looksWhileWaiting paces the looks at the blockers of a waiting node:
// one each recheck, at the ticks of period.
type looksWhileWaiting struct {
	period time.Duration
	last   time.Time
}

// lookWhileWaiting says whether the node stays in the queue (the reboot
// still needed, nothing but a pause blocking it), looking at the
// blockers when a recheck has passed; if not, what blocks it.
func (d *Daemon) lookWhileWaiting(ctx context.Context, log *slog.Logger, looks *looksWhileWaiting) (bool, []block.Blocked) {
	needed, err := d.rebootNeeded()
	if err != nil || !needed {
		return false, nil
	}
	// Half a tick early counts as due: a tick that comes a hair before
	// a whole recheck must not put the look off by a tick.
	if d.Now().Sub(looks.last) < d.recheck()-looks.period/2 {
		return true, nil
	}
	blocked := block.Check(ctx, d.Blockers)
	d.setBlockersMetric(blocked)
	d.notePaused(ctx, log, blocked)
	looks.last = d.Now()
	if steer.OnlyPaused(blocked) {
		d.reportPaused(ctx, log, blocked)
		return true, nil
	}
	return len(blocked) == 0, blocked
}

// refused: the lock would have announced, but the pause or a hold said
// no. Paused, the node keeps its place and looks again at each recheck
// until the pause ends; anything else blocking it leaves the queue.
func (d *Daemon) refused(ctx context.Context, log *slog.Logger) error {
	for {
		// As fresh as the look that refused: a watch a moment behind
		// would send the node back to a refusal at once.
		blocked := block.Check(ctx, d.lastLook())
		d.setBlockersMetric(blocked)
		d.notePaused(ctx, log, blocked)
		switch {
		case len(blocked) == 0:
			// Lifted, or the fresh read failed where this one did not:
			// try again soon, not in a loop of requests.
			return d.waitChange(ctx, time.Second)
		case !steer.OnlyPaused(blocked):
			return d.leaveQueue(ctx, log, blocked)
		}
		d.reportPaused(ctx, log, blocked)
		if err := d.waitChange(ctx, d.recheck()); err != nil {
			return err
		}
		if needed, err := d.rebootNeeded(); err != nil || !needed {
			return nil // the next look decides, from the start
		}
	}
}

// notePaused tells the lock whether the cluster is paused, and the
// operator when a pause this node waited through has ended.
func (d *Daemon) notePaused(ctx context.Context, log *slog.Logger, blocked []block.Blocked) {
	paused := steer.IsPaused(blocked)
	d.Lock.SetPaused(paused)
	if d.paused && !paused {
		log.Info("the cluster's pause has ended; going on from its place in the queue")
		d.event(ctx, log, "Normal", ReasonResumed, "The cluster's pause has ended: going on from its place in the queue")
	}
	d.paused = paused
}

// reportPaused tells the operator that the node waits in its place for
// the pause to end.
func (d *Daemon) reportPaused(ctx context.Context, log *slog.Logger, blocked []block.Blocked) {
	d.setStateMetric("paused")
	s := "waiting for a reboot slot, in its place; " + block.Summary(blocked)
	d.mu.Lock()
	same := d.managerStatus == s
	d.mu.Unlock()
	if !same {
		log.Info("paused: keeping the place in the queue", "blocked_by", block.Summary(blocked))
		d.event(ctx, log, "Normal", ReasonPaused, "Reboot needed, waiting in its place in the queue: "+block.Summary(blocked))
	}
	d.setManagerStatus(s)
}

// showQueue tells the operator where the node is in the queue, and why.
func (d *Daemon) showQueue(st lock.Status) {
	switch {
	case st.State == claim.Holding:
		// Taken: the cycle's next step shows what it does with the slot.
		// Shown here, it would read "waiting" for a moment.
		return
	case st.State == claim.Waiting && st.Behind != "":
		// Behind the front, the lock follows one node and does not read
		// how many are ahead.
		d.setStateMetric("waiting")
		d.setQueuePositionMetric(math.NaN())
		d.setManagerStatus(fmt.Sprintf("waiting for a reboot slot: behind %s (%s)", st.Behind, st.Reason))
	case st.State == claim.Waiting && st.Position >= 0:
		d.setStateMetric("waiting")
		d.setQueuePositionMetric(float64(st.Position))
		d.setManagerStatus(fmt.Sprintf("waiting for a reboot slot: %d ahead (%s)", st.Position, st.Reason))
	case st.State == claim.Entering:
		d.setStateMetric("entering")
		d.setQueuePositionMetric(0)
		d.setManagerStatus("taking a reboot slot: " + st.Reason)
	default:
		d.setStateMetric("waiting")
		d.setManagerStatus("waiting for a reboot slot")
	}
}

// leaveQueue withdraws a waiting claim: the reboot is no longer needed, or
// blocked. A claim that got further meanwhile stays: the holder's checks
// take over.
func (d *Daemon) leaveQueue(ctx context.Context, log *slog.Logger, blocked []block.Blocked) error {
	_, state, err := d.Lock.Own(ctx)
	if err != nil {
		return err
	}
	if state != claim.Waiting {
		return nil
	}
	why := "the reboot is no longer needed"
	if len(blocked) > 0 {
		why = "blocked: " + block.Summary(blocked)
		d.reportBlocked(ctx, log, blocked)
	}
	log.Info("leaving the queue", "reason", why)
	if err := d.Lock.Release(ctx); err != nil {
		return err
	}
	d.event(ctx, log, "Normal", ReasonLeftQueue, "Left the queue for a reboot slot: "+why)
	d.setQueuePositionMetric(-1)
	return nil
}
