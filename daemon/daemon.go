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

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/cycle"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/metrics"
	"github.com/kured-host/kured-host/daemon/printable"
	"github.com/kured-host/kured-host/daemon/sentinel"
	"github.com/kured-host/kured-host/daemon/steer"
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
	Join(ctx context.Context, with marks.Change) error
	Acquire(ctx context.Context, take lock.Take) (claim.Claim, error)
	Update(ctx context.Context, change func(*claim.Claim)) (claim.Claim, error)
	Cordon(ctx context.Context, phase claim.Phase, with marks.Change) (was bool, err error)
	Confirm(ctx context.Context) (claim.Claim, error)
	Release(ctx context.Context) error
	ReleaseUncordoned(ctx context.Context, with marks.Change) error
	ReleaseAfter(ctx context.Context, delay time.Duration) error
	Status() lock.Status
	StatusChanged() <-chan struct{}
	SetPaused(paused bool)
	SetLimits(claim.Limits)
}

var _ Locker = (*lock.Lock)(nil)

// Drainer cordons and drains this node (daemon/drain).
type Drainer interface {
	Cordon(ctx context.Context) error
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

// ReadyWait is one wait for this node's Node to be Ready in the current
// boot.
type ReadyWait interface {
	// Next reports whether it is, and if not why; each call after the
	// first waits up to wait for the Node to change first.
	Next(ctx context.Context, wait time.Duration) (bool, string, error)
	Stop()
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
	// Ready starts a wait for this node's Node to be Ready in the
	// current boot (kube.ReadyWatch).
	Ready func() ReadyWait
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
	// Settings reads the cluster's settings; Reload makes the
	// configuration with them under the host's files; BlockersFor makes
	// the blockers of a configuration. With any nil, the configuration
	// stays as started.
	Settings    SettingsReader
	Reload      func(cluster string) (config.Config, error)
	BlockersFor func(config.Config) []block.Blocker
	// OrdersWatch, if set, runs from the start: the looks at the
	// operator's orders (in Blockers) read it.
	OrdersWatch *steer.Watch
	// FreshOrders, if set, are the operator's orders read fresh, for
	// the last look before the cordon: they stand in for the Blockers
	// of their kinds, which a watch may answer a moment late.
	FreshOrders []block.Blocker

	// holding is the holding claim of this boot as the last step saw it:
	// a claim that vanishes from under it goes through the lost path.
	holding *claim.Claim
	// took says, for the cordon's Event, how long the wait for the slot
	// took; drained, for the reboot's, how long the drain took ("" after
	// a restart in between).
	took, drained string
	// drainedFor is the slot (its claim's Acquired) this process drained
	// the node for, while no phase records it (cycle.Facts.Drained).
	drainedFor *time.Time
	// paused: the cluster was paused at the last look while waiting.
	paused bool
	// inProgress: kured's in-progress mark as this daemon last wrote it.
	inProgress markState
	// settings are the cluster's settings last applied, and the last
	// refused (reported once).
	settings struct{ applied, refused string }

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
	if err := d.start(ctx, log); err != nil || ctx.Err() != nil {
		return stopped(ctx, err)
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
			// At most stepRetryMax: after an outage of the API server, a
			// waiting node must take a free slot within the bound
			// docs/claims.md states ("No idle slot").
			wait := min(time.Duration(failures)*2*time.Second, stepRetryMax)
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

// stepRetryMax is the longest wait before a failed step is tried again:
// a waiting node takes a slot within 10 s of the API server's return
// from an outage, and the step after the retry reads the queue directly
// (its watch is stale then) in a round trip or two.
const stepRetryMax = 6 * time.Second

// ordersFill is how long start waits for the watch of the orders to fill
// its cache: long enough for an API server under load, short enough that
// an outage at start-up delays READY only a little.
const ordersFill = 5 * time.Second

// start prints the plan, starts the lock, reads the own claim and the
// sentinel once, and tells systemd the daemon is ready.
func (d *Daemon) start(ctx context.Context, log *slog.Logger) error {
	for _, line := range Plan(d.Config) {
		log.Info(line)
	}
	if err := d.Lock.Start(ctx); err != nil {
		return err
	}
	if d.OrdersWatch != nil {
		d.OrdersWatch.OnChange = d.wake
		d.OrdersWatch.Run(ctx)
		if !d.OrdersWatch.Filled(ctx, ordersFill) {
			log.Debug("the watch of the orders has not filled its cache yet; reading them directly meanwhile")
		}
	}
	if _, _, err := d.Lock.Own(ctx); err != nil && !errors.Is(err, claim.ErrUnparsable) {
		return err
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

func (d *Daemon) tellManager(state string) {
	if err := d.Manager.Notify(state); err != nil {
		d.Log.Warn("cannot notify systemd", "component", "daemon", "err", err)
	}
}

// setManagerStatus is the one-line state for `systemctl status`. A line break
// would start another sd_notify assignment and a terminal escape would act
// on the operator's terminal: none gets through (daemon/printable).
func (d *Daemon) setManagerStatus(s string) {
	s = printable.String(s)
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

// wake ends a wait for a change (waitChange) now: the sentinel or the
// operator's orders changed.
func (d *Daemon) wake() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
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

// step does one transition of the cycle: package cycle decides which,
// from what the daemon knows; steps runs it.
func (d *Daemon) step(ctx context.Context, log *slog.Logger) error {
	f, err := d.facts()
	if err != nil {
		return err
	}
	s := cycle.Next(f)
	if s.BeforeReboot() {
		// From here a claim that goes away is lost (cycle.Facts.Took).
		// A reboot starts a new process, which holds none.
		held := f.Claim
		d.holding = &held
	}
	return steps[s](d, ctx, log, f)
}

// facts are what the cycle decides from: the claim and Node as the lock
// last read or wrote them, the sentinel's last word, and, while holding,
// this boot's ID.
func (d *Daemon) facts() (cycle.Facts, error) {
	c, state := d.Lock.Known()
	f := cycle.Facts{
		State: state, Claim: c,
		Unreadable: d.Lock.Unreadable() != nil,
		CordonMark: d.Lock.Annotation(drain.CordonAnnotation) != "",
	}
	if d.holding != nil {
		took := time.Time{}
		if d.holding.Acquired != nil {
			took = *d.holding.Acquired
		}
		f.Took = &took
	}
	if d.drainedFor != nil && c.Acquired != nil && d.drainedFor.Equal(*c.Acquired) {
		f.Drained = true
	}
	if needed, err := d.rebootNeeded(); err == nil && !needed {
		f.NotNeeded = true
	}
	if state == claim.Holding && !f.Unreadable {
		boot, err := d.BootID()
		if err != nil {
			return f, err
		}
		f.Boot = boot
	}
	return f, nil
}

// steps runs each of the cycle's steps.
var steps = [...]func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error{
	cycle.RemoveUnreadable: (*Daemon).removeUnreadable,
	cycle.KeepUnreadable:   (*Daemon).keepUnreadable,
	cycle.Lost: func(d *Daemon, ctx context.Context, log *slog.Logger, _ cycle.Facts) error {
		// Gone since the last step (a write's reply, a read, the reply
		// to a cordon showed it): whichever way, one lost path.
		held := *d.holding
		d.holding = nil
		return d.lostPath(ctx, log, held, "the claim went away")
	},
	cycle.UncordonOrphan: func(d *Daemon, ctx context.Context, log *slog.Logger, _ cycle.Facts) error {
		// Lost while this daemon was not running.
		log.Warn("this node is still cordoned by kured-host, with no claim left; uncordoning")
		return d.uncordon(ctx, log, "Uncordoned: the reboot slot was lost")
	},
	cycle.Idle: func(d *Daemon, ctx context.Context, log *slog.Logger, _ cycle.Facts) error {
		return d.idle(ctx, log)
	},
	cycle.LeaveQueue: func(d *Daemon, ctx context.Context, log *slog.Logger, _ cycle.Facts) error {
		return d.leaveQueue(ctx, log, nil)
	},
	cycle.Acquire: func(d *Daemon, ctx context.Context, log *slog.Logger, _ cycle.Facts) error {
		return d.acquire(ctx, log)
	},
	cycle.Cordon: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		return d.cordon(ctx, log, f.Claim)
	},
	cycle.StartDrain: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		return d.startDrain(ctx, log, f.Claim)
	},
	cycle.Drain: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		return d.drain(ctx, log, f.Claim)
	},
	cycle.RequestReboot: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		return d.requestReboot(ctx, log, f.Claim, f.Boot)
	},
	cycle.FinishAbort: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		return d.finishAbort(ctx, log, f.Claim)
	},
	cycle.GiveBack: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		log.Warn("own claim is in a phase that needs a reboot first; releasing it", "phase", string(f.Claim.Phase))
		return d.finishAbort(ctx, log, f.Claim)
	},
	cycle.RecordBack: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		return d.recordBack(ctx, log, f.Claim)
	},
	cycle.Resume: func(d *Daemon, ctx context.Context, log *slog.Logger, f cycle.Facts) error {
		if err := d.resume(ctx, log, f.Claim); err != nil {
			return err
		}
		return d.release(ctx, log, f.Claim)
	},
}
