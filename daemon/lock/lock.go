// Package lock is the slot lock against the Kubernetes API: each node keeps
// its claim on its own Node object, with its own credentials, and takes one
// of the reboot slots by the protocol of docs/claims.md: join (waiting),
// wait until eligible (in the front of its class, from a watch of the
// active claims and the front; behind it, following one node), announce
// (entering), verify from a consistent List, commit (holding) or step back,
// and release after the reboot. Every write is conditional on the Node
// being as this daemon last read or wrote it.
package lock

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// Errors callers act on.
var (
	// ErrLost means the claim is gone or no longer this daemon's: someone
	// removed it, or it was never there. Never recreate it as holding.
	ErrLost = errors.New("claim lost")
	// ErrNotJoined means there is no claim to acquire; Join first.
	ErrNotJoined = errors.New("not in the queue")
	// ErrUnreadable means the own claim cannot be read and says it holds
	// a slot: the daemon neither rewrites nor removes it.
	ErrUnreadable = errors.New("own claim cannot be read and says it holds a slot")
	// ErrRefused means Options.MayAnnounce, Take.Check or Options.Held
	// said no: the claim is waiting, in its place, or (from Cordon)
	// holding, with no cordon made.
	ErrRefused = errors.New("may not announce now")
)

// Options configure a Lock.
type Options struct {
	Client kubernetes.Interface // the node's own credentials
	// Metadata, with the same credentials, reads and watches the queue
	// as object metadata only (labels and annotations hold the claims),
	// without the Nodes' status; nil reads whole Nodes.
	Metadata metadata.Interface
	Node     string
	// Limits is this node's configuration: concurrency and group rules.
	Limits claim.Limits
	// WaitingGrace passes over a waiting node that stays eligible this long
	// without announcing (its daemon seems gone).
	WaitingGrace time.Duration
	// TTL counts out holders older than this; 0 (the default) never does.
	TTL time.Duration
	// AlarmAge and EnteringAlarmAge raise alarms for old claims.
	AlarmAge, EnteringAlarmAge time.Duration
	// Now is this host's clock, for its own timers (the grace, the
	// release delay).
	Now func() time.Time
	// ServerNow is the API server's clock as this host estimates it: the
	// times a claim records (since, updated, acquired) and the reference
	// its readers judge them by (their age, the TTL, plausibility).
	ServerNow func() time.Time
	// ClockTolerance is the stated clock tolerance
	// (claim.ClockTolerance): another node's claim with a
	// time further than this ahead of ServerNow, or, while active, with a
	// recorded group its Node's labels contradict, is not believed: it
	// counts as an unreadable claim (claim.Plausible). 0 derives it from
	// AlarmAge, EnteringAlarmAge and TTL as the configuration does.
	ClockTolerance time.Duration
	// BootID returns the current boot's ID.
	BootID func() (string, error)
	Log    *slog.Logger
	// Alarms is told about claims that keep their place too long (an
	// Event, a metric); may be nil.
	Alarms AlarmReporter
	// Rand jitters back-offs; nil uses a random source.
	Rand *rand.Rand
	// MayAnnounce, if set, is asked right before each announce (an
	// operator's pause or hold, read fresh); an error keeps the claim
	// waiting and Acquire returns it, wrapped in ErrRefused.
	MayAnnounce func(context.Context) error
	// Held, if set, says whether the own Node, as read, is held by an
	// operator (a label): it is asked of the version the commit is
	// conditional on (from the verify's read) and of the one the cordon
	// is, so that a hold set before either read is always obeyed and one
	// set after it makes the write fail and be read again. An error
	// before the commit steps the claim back to waiting, in its place,
	// and one before the cordon makes Cordon fail; both wrapped in
	// ErrRefused.
	Held func(own metav1.Object) error
	// OwnWatched, if set, is this node's own Node's metadata as a live
	// watch has it (ok false while the watch is not live): a resync
	// while following reads the own claim only when the watch shows it
	// changed, or cannot tell.
	OwnWatched func() (metav1.Object, bool)
}

// Lock is one node's side of the slot lock.
type Lock struct {
	o   Options
	log *slog.Logger

	// base is Start's context: the watch lives at most as long.
	base    context.Context
	changed chan struct{}
	// counting starts keepCount at the first Own.
	counting sync.Once
	watchMu  sync.Mutex
	watch    *nodeWatch // nil while not watching

	// front is what this node remembers of the others (their grace,
	// readiness and alarms, the pause) and decides from the front.
	front *queue.Front

	mu  sync.Mutex
	own ownClaim
	// limits are this node's configured limits (Options.Limits, then
	// SetLimits).
	limits claim.Limits
	status Status
	// statusChanged has a value when status changed since the cycle
	// last took it (StatusChanged).
	statusChanged chan struct{}
	// failures counts writes in a row that failed other than by a
	// conflict, for back-off.
	failures int
	// claims caches the parsed claims of the front's last snapshot;
	// bindingClaims, of verify's last read.
	claims, bindingClaims queue.Reader
	// nodes is the cluster's node count as last read (clusterSize), 0
	// before: it paces the join.
	nodes int
}

// Status is the lock's view for the operator (sd_notify, status).
type Status struct {
	State    claim.State
	Position int // place among the waiting nodes, from 0; -1 when not waiting
	// Behind names the node this one follows, behind the front of the
	// queue (docs/claims.md): Position is then not known.
	Behind string
	Reason string // why it is not yet taking a slot
}

// New creates a Lock; Start must be called before Acquire.
func New(o Options) *Lock {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ServerNow == nil {
		o.ServerNow = o.Now
	}
	if o.ClockTolerance <= 0 {
		o.ClockTolerance, _ = claim.ClockTolerance(o.EnteringAlarmAge, o.AlarmAge, o.TTL)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	l := &Lock{
		o: o, log: o.Log.With("component", "lock"),
		changed:       make(chan struct{}, 1),
		limits:        o.Limits,
		status:        Status{Position: -1},
		statusChanged: make(chan struct{}, 1),
	}
	l.front = &queue.Front{Node: o.Node, Grace: o.WaitingGrace, TTL: o.TTL,
		AlarmAge: o.AlarmAge, EnteringAlarmAge: o.EnteringAlarmAge,
		Metadata: o.Metadata != nil, Jitter: l.jitter}
	return l
}

// Start prepares the lock to run until ctx ends. The watches start when
// this node waits (of its predecessor behind the front, of the front and
// the active claims in it) and stop when it does not need them, so that
// a node that needs no reboot costs the API server nothing.
func (l *Lock) Start(ctx context.Context) error {
	l.base = ctx
	return nil
}

// countEvery is how often, at the least, a running daemon reads the
// cluster's node count again (jittered up to twice that).
const countEvery = 3 * time.Hour

// startCount begins keeping the count of the cluster's nodes that paces
// a join (paceJoin), at the first read of the own claim. Read when the
// need came, the counts of a cluster whose nodes all learn of a kernel
// update at once were that roll's busiest second. A daemon that holds no
// slot counts right away, in its start-up: every request of its start-up
// is answered before it tells systemd it is ready, and it makes none
// while idle. One that holds a slot is back after its reboot: the count
// would only delay its release, and its next need is days away, so it
// counts at the first period's end.
func (l *Lock) startCount(ctx context.Context, s claim.State) {
	l.counting.Do(func() {
		if s != claim.Holding {
			l.countNodes(ctx)
		}
		if l.base != nil {
			go l.keepCount(l.base)
		}
	})
}

// keepCount reads the node count again every countEvery to 2·countEvery
// until ctx ends. A daemon runs for weeks between kernel updates while
// the cluster may grow; 500 nodes reading it four to eight times a day
// are a few requests a minute.
func (l *Lock) keepCount(ctx context.Context) {
	for sleep(ctx, l.jitter(countEvery)) == nil {
		l.countNodes(ctx)
	}
}

// SetPaused tells the lock whether the cluster is paused, as the cycle
// read it (queue.Front.SetPaused says what it changes).
func (l *Lock) SetPaused(paused bool) {
	l.front.SetPaused(paused, l.o.Now())
}

// SetLimits changes this node's configured limits (the cluster's
// settings changed). The cycle calls it only while the node has no claim:
// a claim publishes the limits it was made with, and the stricter of
// those and the configuration's stays published until it is released.
func (l *Lock) SetLimits(lim claim.Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limits = lim
}

// ownLimits are this node's configured limits.
func (l *Lock) ownLimits() claim.Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limits
}

// Status returns the lock's current view.
func (l *Lock) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

// StatusChanged has a value once Status has changed since the last
// value was taken: the cycle shows the operator the lock's status when it
// changes, not only on its own ticker.
func (l *Lock) StatusChanged() <-chan struct{} {
	return l.statusChanged
}

func (l *Lock) setStatus(s Status) {
	l.mu.Lock()
	changed := s != l.status
	l.status = s
	l.mu.Unlock()
	if changed {
		select {
		case l.statusChanged <- struct{}{}:
		default: // one already waits to be taken
		}
	}
}

// jitter returns a duration in [d, 2d).
func (l *Lock) jitter(d time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return d + time.Duration(l.o.Rand.Int64N(int64(d)))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
