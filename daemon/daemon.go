// Package daemon is `kured-host run`: the reboot cycle on one node, a state
// machine over the claim the node keeps on its own Node. Every step is
// recorded in the claim before or as it happens, so a restart of the daemon
// or of the machine at any moment resumes where it was:
//
//	no claim   reboot needed and nothing blocks -> join (waiting)
//	waiting    take a slot (entering -> holding); leave the queue if blocked
//	holding    same boot: check blockers, cordon, drain, record, reboot
//	           new boot:  wait for Ready and health, uncordon, release delay, release
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kured-host/kured-host/daemon/alarm"
	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/metrics"
	"github.com/kured-host/kured-host/daemon/notify"
	"github.com/kured-host/kured-host/daemon/sentinel"
)

// ServiceManager is systemd, told of the daemon's state (sd_notify:
// READY, STATUS, WATCHDOG, STOPPING). The chat messages are package notify's.
type ServiceManager interface {
	Notify(state string) error
}

// Locker is the slot lock as the cycle uses it (daemon/lock).
type Locker interface {
	Start(ctx context.Context) error
	Own(ctx context.Context) (claim.Claim, claim.State, error)
	Known() (claim.Claim, claim.State)
	Unreadable() error
	Annotation(key string) string
	Join(ctx context.Context) error
	Acquire(ctx context.Context) (claim.Claim, error)
	Update(ctx context.Context, change func(*claim.Claim)) (claim.Claim, error)
	Confirm(ctx context.Context) (claim.Claim, error)
	Release(ctx context.Context) error
	ReleaseAfter(ctx context.Context, delay time.Duration) error
	Status() lock.Status
}

var _ Locker = (*lock.Lock)(nil)

// Drainer cordons and drains this node (daemon/drain).
type Drainer interface {
	Unschedulable(ctx context.Context) (bool, error)
	Cordon(ctx context.Context) (already bool, err error)
	Uncordon(ctx context.Context) error
	Drain(ctx context.Context) error
}

// EventSink records Kubernetes Events on this node's Node.
type EventSink interface {
	Emit(ctx context.Context, node, eventType, reason, message string) error
}

// Rebooter reboots the machine (logind or a command).
type Rebooter interface {
	Reboot(ctx context.Context) error
}

// Daemon is one node's kured-host.
type Daemon struct {
	Config   config.Config
	Log      *slog.Logger
	Manager  ServiceManager
	Lock     Locker
	Sentinel sentinel.Checker
	Blockers []block.Blocker
	Drainer  Drainer
	Rebooter Rebooter
	BootID   func() (string, error)
	// Ready reports whether this node's Node is Ready in the current
	// boot, and if not, why.
	Ready func(ctx context.Context) (bool, string, error)
	// Health runs the health command once, bounded by timeout; nil
	// error means healthy. Nil runs health.command (HealthCommand) when
	// one is configured.
	Health  func(ctx context.Context, timeout time.Duration) error
	Metrics *metrics.Metrics
	Events  EventSink // may be nil
	// Marks and Messages are kured's node marks and notifications; nil
	// when not configured.
	Marks    Marker
	Messages Messenger
	// Watchdog is systemd's WatchdogSec (0: off); WATCHDOG=1 is sent at
	// half of it.
	Watchdog time.Duration
	// Trim, if set, runs once the daemon is ready: it hands the kernel
	// back the memory only start-up used (host.TrimBinary).
	Trim func() (int64, error)
	Node string
	Now  func() time.Time

	// holding is the holding claim of this boot as the last step saw it:
	// a claim that vanishes from under it goes through the lost path.
	holding *claim.Claim

	mu     sync.Mutex
	needed bool
	// toldNeeded: RebootRequired was reported for the current need.
	toldNeeded    bool
	sentErr       error
	changed       chan struct{}
	managerStatus string
}

// Run runs the cycle until ctx is cancelled (SIGTERM); cancellation is a
// clean stop, not an error: the state is in the claim.
func (d *Daemon) Run(ctx context.Context) error {
	if d.Now == nil {
		d.Now = time.Now
	}
	d.changed = make(chan struct{}, 1)
	log := d.Log.With("component", "daemon")
	for _, line := range Plan(d.Config) {
		log.Info(line)
	}
	if err := d.Lock.Start(ctx); err != nil {
		return stopped(ctx, err)
	}
	if _, _, err := d.Lock.Own(ctx); err != nil && !errors.Is(err, claim.ErrUnparsable) {
		return stopped(ctx, err)
	}
	first := make(chan struct{})
	var once sync.Once
	go sentinel.Watch(ctx, d.Sentinel, d.Config.Sentinel.Period.Std(), log, func(needed bool, err error) {
		d.setNeeded(needed, err, log)
		once.Do(func() { close(first) })
	})
	select {
	case <-ctx.Done():
		return nil
	case <-first:
	}
	d.tellManager("READY=1")
	log.Info("ready", "node", d.Node)
	if d.Trim != nil {
		d.trim(log)
	}
	if d.Watchdog > 0 {
		go d.watchdog(ctx)
	}
	failures := 0
	for ctx.Err() == nil {
		err := d.step(ctx, log)
		switch {
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
		case errors.Is(err, lock.ErrUnreadable):
			// The own claim changed into one that cannot be read while
			// this step worked on it: the next step leaves it alone and
			// says so.
			failures = 0
		default:
			failures++
			// At most 15 s: after an outage of the API server, a waiting
			// node must take a free slot within the bound docs/claims.md
			// states (40 s).
			wait := min(time.Duration(failures)*5*time.Second, 15*time.Second)
			log.Error("step failed; trying again", "err", err, "retry_in", wait)
			d.countError("step")
			d.setManagerStatus("error: " + firstLine(err.Error()) + " (retrying)")
			_ = sleep(ctx, wait)
		}
	}
	d.tellManager("STOPPING=1")
	log.Info("stopping", "reason", context.Cause(ctx))
	return nil
}

// trim reports what handing start-up pages back saved; a kernel that
// does not do it costs nothing but memory, so it is not an error.
func (d *Daemon) trim(log *slog.Logger) {
	_, before, _ := host.Resident()
	advised, err := d.Trim()
	if err != nil {
		log.Info("binary pages used at start-up kept resident", "err", err)
		return
	}
	anon, after, _ := host.Resident()
	log.Info("binary pages used at start-up handed back to the kernel",
		"advised_kib", advised>>10, "resident_file_kib", fmt.Sprintf("%d -> %d", before, after), "resident_anon_kib", anon)
}

func (d *Daemon) watchdog(ctx context.Context) {
	t := time.NewTicker(d.Watchdog / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.tellManager("WATCHDOG=1")
		}
	}
}

func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

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
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

func (d *Daemon) rebootNeeded() (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.needed, d.sentErr
}

func (d *Daemon) tellManager(state string) {
	if err := d.Manager.Notify(state); err != nil {
		d.Log.Warn("cannot notify systemd", "component", "daemon", "err", err)
	}
}

// setManagerStatus is the one-line state for `systemctl status`. A line break
// would start another sd_notify assignment: none gets through.
func (d *Daemon) setManagerStatus(s string) {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	d.mu.Lock()
	same := s == d.managerStatus
	d.managerStatus = s
	d.mu.Unlock()
	if !same {
		d.tellManager("STATUS=" + s)
	}
}

// waitChange waits for the sentinel to change, or at most t.
func (d *Daemon) waitChange(ctx context.Context, t time.Duration) error {
	timer := time.NewTimer(t)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-d.changed:
	case <-timer.C:
	}
	return nil
}

func sleep(ctx context.Context, t time.Duration) error {
	timer := time.NewTimer(t)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-timer.C:
		return nil
	}
}

// recheck is how often blockers are looked at again while they block or
// while the node waits for a slot.
func (d *Daemon) recheck() time.Duration {
	return min(d.Config.Sentinel.Period.Std(), time.Minute)
}

// step does one transition of the cycle.
func (d *Daemon) step(ctx context.Context, log *slog.Logger) error {
	c, state := d.Lock.Known()
	if err := d.Lock.Unreadable(); err != nil {
		return d.unreadable(ctx, log, state, err)
	}
	if held := d.holding; held != nil && (state != claim.Holding || c.Acquired == nil || !c.Acquired.Equal(derefTime(held.Acquired))) {
		// Gone since the last step (a write's reply, a read, the reply to
		// a cordon showed it): whichever way, one lost path. (This
		// process took it in this boot: a reboot starts a new process.)
		d.holding = nil
		return d.lostPath(ctx, log, *held, "the claim went away")
	}
	switch state {
	case "":
		if d.Lock.Annotation(drain.CordonAnnotation) != "" {
			// A cordon of ours that outlived its claim (lost while this
			// daemon was not running): undo it.
			log.Warn("this node is still cordoned by kured-host, with no claim left; uncordoning")
			return d.uncordon(ctx, log, "Uncordoned: the reboot slot was lost")
		}
		return d.idle(ctx, log)
	case claim.Waiting, claim.Entering:
		return d.acquire(ctx, log)
	case claim.Holding:
		boot, err := d.BootID()
		if err != nil {
			return err
		}
		if c.BootID != "" && c.BootID != boot {
			return d.afterReboot(ctx, log, c)
		}
		held := c
		d.holding = &held
		return d.beforeReboot(ctx, log, c, boot)
	}
	return d.unreadable(ctx, log, state, fmt.Errorf("its label is %q, a state this daemon does not write", state))
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// unreadable handles an own claim that cannot be read: garbage, another
// version, a label and an annotation that disagree (an admin's edit of one
// of them). A waiting or entering one stands for nothing this daemon has
// done: it is removed, and the node starts over. A holding one (or a state
// this daemon does not write) may stand for a cordon, a drain, a reboot
// asked for: the daemon never guesses what it was, never releases it nor
// uncordons on it, and says so until an admin fixes or removes it; the
// other nodes count it as holding meanwhile. (Removed, a cordon of
// kured-host's is undone from its annotation.)
func (d *Daemon) unreadable(ctx context.Context, log *slog.Logger, state claim.State, why error) error {
	if state == claim.Waiting || state == claim.Entering {
		log.Warn("own claim cannot be read; removing it and starting over", "state", string(state), "err", why)
		d.event(ctx, log, "Warning", alarm.ReasonUnreadableClaim, "The claim on this node cannot be read ("+firstLine(why.Error())+"); it was "+string(state)+", so it was removed and the node starts over")
		return d.Lock.Release(ctx)
	}
	d.setStateMetric("unreadable")
	status := "own claim cannot be read; keeping it until an admin fixes or removes it: " + firstLine(why.Error())
	d.mu.Lock()
	same := d.managerStatus == status
	d.mu.Unlock()
	if !same {
		log.Error("own claim cannot be read; leaving it alone (no release, no uncordon) until an admin fixes or removes it", "state", string(state), "err", why)
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
		d.setBlockersMetric(nil)
		d.setManagerStatus("idle: no reboot needed")
		return d.waitChange(ctx, time.Hour)
	}
	if !d.toldNeeded {
		d.toldNeeded = true
		d.event(ctx, log, "Normal", ReasonRebootRequired, "A reboot is needed: "+d.Sentinel.String())
		d.mark(ctx, log, "reboot needed", func(m Marker) error { return m.Needed(ctx, d.Now()) })
	}
	blocked := block.Check(ctx, d.Blockers)
	d.setBlockersMetric(blocked)
	if len(blocked) > 0 {
		d.setStateMetric("blocked")
		d.reportBlocked(ctx, log, blocked)
		return d.waitChange(ctx, d.recheck())
	}
	d.setManagerStatus("reboot needed: joining the queue")
	if err := d.Lock.Join(ctx); err != nil {
		return err
	}
	d.event(ctx, log, "Normal", ReasonWaitingForSlot, "Joined the queue for a reboot slot ("+limitsText(d.Config.Lock)+", or stricter limits published by other nodes)")
	return nil
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
// needed or becomes blocked while waiting.
func (d *Daemon) acquire(ctx context.Context, log *slog.Logger) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		c, err := d.Lock.Acquire(actx)
		if err == nil {
			waited := d.Now().Sub(c.Since)
			if d.Metrics != nil {
				d.Metrics.SlotWait.Observe(max(waited, 0).Seconds())
			}
			d.event(ctx, log, "Normal", ReasonSlotAcquired, fmt.Sprintf("Took a reboot slot after waiting %s", waited.Round(time.Second)))
		}
		done <- err
	}()
	tick := time.NewTicker(min(d.recheck(), 5*time.Second))
	defer tick.Stop()
	lastBlockers := d.Now()
	for {
		select {
		case err := <-done:
			if errors.Is(err, lock.ErrLost) || errors.Is(err, lock.ErrNotJoined) {
				log.Warn("the claim went away while waiting; starting over", "err", err)
				_, _, err = d.Lock.Own(ctx)
			}
			return err
		case <-d.changed:
		case <-tick.C:
		}
		d.showQueue(d.Lock.Status())
		needed, nerr := d.rebootNeeded()
		var blocked []block.Blocked
		if nerr == nil && needed && d.Now().Sub(lastBlockers) >= d.recheck() {
			blocked = block.Check(ctx, d.Blockers)
			d.setBlockersMetric(blocked)
			lastBlockers = d.Now()
		}
		if nerr == nil && needed && len(blocked) == 0 {
			continue
		}
		// Leave the queue: stop acquiring, then withdraw if still waiting.
		cancel()
		<-done
		return d.leaveQueue(ctx, log, blocked)
	}
}

// showQueue tells the operator where the node is in the queue, and why.
func (d *Daemon) showQueue(st lock.Status) {
	switch {
	case st.State == claim.Waiting && st.Position >= 0:
		d.setStateMetric("waiting")
		d.setQueuePositionMetric(st.Position)
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

// beforeReboot advances a holder in the boot in which it took the slot,
// one phase of the cycle per call: each phase is recorded in the claim
// before the step it names, so that a restart resumes there.
func (d *Daemon) beforeReboot(ctx context.Context, log *slog.Logger, c claim.Claim, boot string) error {
	switch c.Phase {
	case claim.PhaseAcquired:
		return d.cordon(ctx, log, c)
	case claim.PhaseCordoned:
		return d.startDrain(ctx, log, c)
	case claim.PhaseDraining:
		return d.drain(ctx, log, c)
	case claim.PhaseDrained, claim.PhaseRebooting:
		return d.requestReboot(ctx, log, c, boot)
	case claim.PhaseAborted:
		return d.finishAbort(ctx, log, c)
	}
	// A phase that belongs after a reboot, in the same boot: the claim
	// was written by something else. Give the slot back as it stands.
	log.Warn("own claim is in a phase that needs a reboot first; releasing it", "phase", string(c.Phase))
	return d.finishAbort(ctx, log, c)
}

// cordon: the slot was just taken. The blockers are checked again right
// before the first disruptive step (blocked: the slot is given back), the
// claim confirmed, and whether the node was already unschedulable recorded
// before it is cordoned.
func (d *Daemon) cordon(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("draining")
	d.setQueuePositionMetric(-1)
	blocked := block.Check(ctx, d.Blockers)
	d.setBlockersMetric(blocked)
	if len(blocked) > 0 {
		d.reportBlocked(ctx, log, blocked)
		log.Info("blocked after taking the slot; giving it back", "blocked_by", block.Summary(blocked))
		if err := d.Lock.Release(ctx); err != nil {
			return err
		}
		d.holding = nil
		d.event(ctx, log, "Normal", ReasonSlotReleased, "Gave the reboot slot back before cordoning: blocked by "+block.Summary(blocked))
		return nil
	}
	if _, err := d.Lock.Confirm(ctx); err != nil {
		return d.lost(ctx, log, c, err)
	}
	was, err := d.Drainer.Unschedulable(ctx)
	if err != nil {
		return err
	}
	// Recorded before cordoning: a restart in between must not take
	// our cordon for the admin's.
	if _, err := d.Lock.Update(ctx, func(c *claim.Claim) {
		c.Phase, c.WasUnschedulable, c.Cordoned = claim.PhaseCordoned, was, !was
	}); err != nil {
		return d.lost(ctx, log, c, err)
	}
	d.setManagerStatus("holding a reboot slot: cordoning")
	if !was {
		if _, err := d.Drainer.Cordon(ctx); err != nil {
			return err
		}
		log.Info("cordoned")
		d.event(ctx, log, "Normal", ReasonCordoned, "Cordoned for the reboot")
	} else {
		d.event(ctx, log, "Normal", ReasonCordoned, "Already unschedulable; it will stay so after the reboot")
	}
	return nil
}

// startDrain: cordoned. It redoes a cordon a restart may have cut short,
// marks the node (kured's annotations), sends the drain message, waits
// drain.delay and records the drain.
func (d *Daemon) startDrain(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("draining")
	if c.Cordoned {
		// A restart between the record and the cordon: the cordon
		// is a disruptive step, confirmed first like the others.
		if _, err := d.Lock.Confirm(ctx); err != nil {
			return d.lost(ctx, log, c, err)
		}
		if _, err := d.Drainer.Cordon(ctx); err != nil {
			return err
		}
	}
	// Here rather than at the cordon so that a restart in between
	// still marks the node: these writes are idempotent.
	d.mark(ctx, log, "reboot in progress", func(m Marker) error { return m.Started(ctx, d.Now()) })
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

// drain evicts the pods, each eviction confirmed; a failed drain gives the
// slot back (abort) unless drain.force_reboot.
func (d *Daemon) drain(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	if _, err := d.Lock.Confirm(ctx); err != nil {
		return d.lost(ctx, log, c, err)
	}
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
		d.event(ctx, log, "Normal", ReasonDrained, fmt.Sprintf("Drained in %s", took.Round(time.Second)))
	}
	_, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseDrained })
	return d.lostIf(ctx, log, c, err)
}

// requestReboot: drained. After reboot.delay, the claim is confirmed and
// the reboot recorded with this boot's ID, then asked for.
func (d *Daemon) requestReboot(ctx context.Context, log *slog.Logger, c claim.Claim, boot string) error {
	if c.Phase == claim.PhaseDrained {
		if delay := d.Config.Reboot.Delay.Std(); delay > 0 {
			d.setManagerStatus(fmt.Sprintf("holding a reboot slot: rebooting in %s", delay))
			if err := sleep(ctx, delay); err != nil {
				return err
			}
		}
	}
	if _, err := d.Lock.Confirm(ctx); err != nil {
		return d.lost(ctx, log, c, err)
	}
	if _, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase, c.BootID = claim.PhaseRebooting, boot }); err != nil {
		return d.lost(ctx, log, c, err)
	}
	return d.reboot(ctx, log, boot)
}

// reboot asks for the reboot, and again if the machine is still up after
// reboot.timeout.
func (d *Daemon) reboot(ctx context.Context, log *slog.Logger, boot string) error {
	d.setStateMetric("rebooting")
	d.setManagerStatus("holding a reboot slot: rebooting")
	log.Info("rebooting")
	d.event(ctx, log, "Normal", ReasonRebooting, fmt.Sprintf("Rebooting (%s; boot %.8s)", d.rebootMethod(), boot))
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

// abort gives the slot back after a failed drain: uncordon if we cordoned,
// record the abort, release, and wait before trying again.
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

func (d *Daemon) finishAbort(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	if d.cordonedByUs(c) {
		if err := d.uncordon(ctx, log, "Uncordoned: the reboot was given up"); err != nil {
			return err
		}
	}
	d.mark(ctx, log, "reboot given up", func(m Marker) error { return m.Cancelled(ctx) })
	if c.Phase != claim.PhaseAborted {
		if _, err := d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase, c.Cordoned = claim.PhaseAborted, false }); err != nil {
			return d.lost(ctx, log, c, err)
		}
	}
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
// a lost claim is never recreated as holding.
func (d *Daemon) lostPath(ctx context.Context, log *slog.Logger, c claim.Claim, why string) error {
	d.holding = nil
	log.Warn("the slot is no longer ours before the reboot; stopping and starting over", "why", why)
	d.event(ctx, log, "Warning", ReasonSlotLost, "The reboot slot was taken away before the reboot (claim removed or changed by someone else); starting over")
	if c.Cordoned || d.Lock.Annotation(drain.CordonAnnotation) != "" {
		if err := d.uncordon(ctx, log, "Uncordoned: the reboot slot was lost"); err != nil {
			return err
		}
	}
	d.mark(ctx, log, "reboot given up", func(m Marker) error { return m.Cancelled(ctx) })
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

// afterReboot: the boot ID changed, so the reboot happened. Wait for the
// node to be Ready and healthy, uncordon if we cordoned, wait the release
// delay and release. After any boot, planned or not, in any phase (the
// release delay included), the slot is freed only once the kubelet
// reports this boot Ready: a second, unplanned reboot starts that wait
// over.
func (d *Daemon) afterReboot(ctx context.Context, log *slog.Logger, c claim.Claim) error {
	d.setStateMetric("rebooted")
	if c.Phase != claim.PhaseRebooted && c.Phase != claim.PhaseReleasing {
		// The claim's last write before the reboot was the request.
		down := d.Now().Sub(c.Updated)
		log.Info("back after the reboot", "previous_boot", c.BootID, "since_reboot_requested", down.Round(time.Second))
		if d.Metrics != nil && c.Phase == claim.PhaseRebooting && down > 0 {
			d.Metrics.RebootDuration.Observe(down.Seconds())
		}
		var err error
		if c, err = d.Lock.Update(ctx, func(c *claim.Claim) { c.Phase = claim.PhaseRebooted }); err != nil {
			return err
		}
		d.event(ctx, log, "Normal", ReasonRebooted, fmt.Sprintf("Rebooted: back %s after asking (boot %.8s before)", down.Round(time.Second), c.BootID))
	}
	if err := d.waitHealthy(ctx, log); err != nil {
		return err
	}
	if c.Phase == claim.PhaseRebooted {
		d.mark(ctx, log, "reboot finished", func(m Marker) error { return m.Finished(ctx) })
		if d.cordonedByUs(c) {
			if err := d.uncordon(ctx, log, "Uncordoned after the reboot"); err != nil {
				return err
			}
		}
		d.message(ctx, notify.Uncordon, "")
	}
	if delay := d.Config.Lock.ReleaseDelay.Std(); delay > 0 {
		d.setManagerStatus(fmt.Sprintf("rebooted; holding the slot for the release delay (%s)", delay))
	}
	if err := d.Lock.ReleaseAfter(ctx, d.Config.Lock.ReleaseDelay.Std()); err != nil {
		return err
	}
	log.Info("reboot done; slot released")
	d.event(ctx, log, "Normal", ReasonSlotReleased, "Reboot done; reboot slot released")
	d.setStateMetric("idle")
	d.setManagerStatus("idle: rebooted")
	return nil
}

// waitHealthy waits until the Node is Ready in this boot and the health command (if
// any) passes, reporting once if it takes longer than health.timeout. The
// slot stays held meanwhile.
func (d *Daemon) waitHealthy(ctx context.Context, log *slog.Logger) error {
	began := d.Now()
	reported := false
	last := ""
	for {
		ready, why, err := d.Ready(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("cannot read the node's Ready condition", "err", err)
			why = "cannot read the Node"
		}
		healthy := ready
		if ready && (d.Health != nil || len(d.Config.Health.Command) > 0) {
			healthy, why = d.health(ctx)
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
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
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
