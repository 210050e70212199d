// Package lock is the slot lock against the Kubernetes API: each node keeps
// its claim on its own Node object, with its own credentials, and takes one
// of the reboot slots by the protocol of docs/claims.md: join (waiting),
// wait until eligible (from a watch of the claimed nodes only), announce
// (entering), verify from a consistent List, commit (holding) or step back,
// and release after the reboot. Every write is conditional on the Node
// being as this daemon last read or wrote it.
package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
)

// Errors callers act on.
var (
	// ErrLost means the claim is gone or no longer this daemon's: someone
	// removed it, or it was never there. Never recreate it as holding.
	ErrLost = errors.New("claim lost")
	// ErrNotJoined means there is no claim to acquire; Join first.
	ErrNotJoined = errors.New("not in the queue")
)

// Options configure a Lock.
type Options struct {
	Client kubernetes.Interface // the node's own credentials
	// Metadata, with the same credentials, reads the queue from far back
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
	// (config.LockConfig.ClockTolerance): another node's claim with a
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
}

// Lock is one node's side of the slot lock.
type Lock struct {
	o   Options
	log *slog.Logger

	// base is Start's context: the watch lives at most as long.
	base    context.Context
	changed chan struct{}
	watchMu sync.Mutex
	watch   *nodeWatch // nil while not watching

	mu  sync.Mutex
	own ownClaim
	// firstEligible is when this daemon first saw each other waiting node
	// eligible; after WaitingGrace it is passed over.
	firstEligible map[string]time.Time
	status        Status
	alarmed       map[string]bool
	// failures counts writes in a row that failed other than by a
	// conflict, for back-off.
	failures int
	claims   claimCache
}

// ownClaim is the node's claim as this daemon last read or wrote it.
type ownClaim struct {
	uid         types.UID
	rv          string
	state       claim.State // "" for none
	claim       claim.Claim
	err         error // why the claim cannot be read; nil if it can
	labels      map[string]string
	annotations map[string]string
}

// Status is the lock's view for the operator (sd_notify, status).
type Status struct {
	State    claim.State
	Position int    // place among the waiting nodes, from 0; -1 when not waiting
	Reason   string // why it is not yet taking a slot
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
		o.ClockTolerance, _ = config.LockConfig{
			AlarmAge: config.Duration(o.AlarmAge), EnteringAlarmAge: config.Duration(o.EnteringAlarmAge), TTL: config.Duration(o.TTL),
		}.ClockTolerance()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &Lock{
		o: o, log: o.Log.With("component", "lock"),
		changed:       make(chan struct{}, 1),
		firstEligible: map[string]time.Time{},
		alarmed:       map[string]bool{},
		status:        Status{Position: -1},
	}
}

// Start prepares the lock to run until ctx ends. It makes no request:
// the watch of the claimed nodes starts when this node waits near the
// front of the queue and stops when it does not need it, so that a node
// that needs no reboot, or is far back, costs the API server nothing.
func (l *Lock) Start(ctx context.Context) error {
	l.base = ctx
	return nil
}

// nodeWatch is an informer on the claimed nodes (label selector).
type nodeWatch struct {
	lister corelisters.NodeLister
	stop   func()
	inf    cache.SharedIndexInformer
	// brokenAt is the informer's resourceVersion when its watch last
	// failed ("" when it has not): until it moves on, the cache may be
	// behind by the length of an outage and client-go's back-off.
	mu       sync.Mutex
	broken   bool
	brokenAt string
}

// stale reports whether the watch failed and has not caught up since.
func (w *nodeWatch) stale() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken && w.inf.LastSyncResourceVersion() != w.brokenAt {
		w.broken = false
	}
	return w.broken
}

// ensureWatch starts the watch of the claimed nodes if it is not running,
// and returns once its cache is filled.
func (l *Lock) ensureWatch(ctx context.Context) error {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	if l.watch != nil {
		return nil
	}
	base := l.base
	if base == nil {
		base = ctx
	}
	wctx, cancel := context.WithCancel(base)
	// One informer on Nodes, not a SharedInformerFactory, which would
	// link every API group's informers into the binary.
	nodes := l.o.Client.CoreV1().Nodes()
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = claim.Label
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = claim.Label
			return nodes.Watch(ctx, o)
		},
	}, &corev1.Node{}, 0, cache.Indexers{})
	if err := inf.SetTransform(slim); err != nil {
		cancel()
		return fmt.Errorf("watch claimed nodes: %w", err)
	}
	nw := &nodeWatch{lister: corelisters.NewNodeLister(inf.GetIndexer()), inf: inf}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		nw.mu.Lock()
		nw.broken, nw.brokenAt = true, inf.LastSyncResourceVersion()
		nw.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		cancel()
		return fmt.Errorf("watch claimed nodes: %w", err)
	}
	notify := func(any) { l.poke() }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, DeleteFunc: notify,
		UpdateFunc: func(o, n any) {
			// The kubelet's status reports change nothing the queue
			// reads: wake only for a claim or readiness that changed.
			if on, ok := o.(*corev1.Node); ok {
				if nn, ok := n.(*corev1.Node); ok && sameForQueue(on, nn) {
					return
				}
			}
			notify(n)
		},
	}); err != nil {
		cancel()
		return fmt.Errorf("watch claimed nodes: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(wctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		cache.WaitForCacheSync(wctx.Done(), inf.HasSynced)
	}()
	select {
	case <-synced:
	case <-ctx.Done():
		stop()
		return context.Cause(ctx)
	}
	if wctx.Err() != nil {
		stop()
		return fmt.Errorf("watch claimed nodes: %w", context.Cause(wctx))
	}
	nw.stop = stop
	l.watch = nw
	l.log.Debug("watching the claimed nodes")
	return nil
}

// slim keeps of a watched Node what the queue reads (name, labels,
// annotations, the Ready condition): a real Node's status (its images,
// above all) and managed fields would take most of the cache.
func slim(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	meta := n.ObjectMeta
	meta.ManagedFields = nil // before the copy: they are most of it
	var ready corev1.ConditionStatus
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status
		}
	}
	return queueNode(*meta.DeepCopy(), ready), nil
}

// queueNode is a Node as the queue reads it: metadata, and the Ready
// condition if its status is known ("" leaves it out).
func queueNode(meta metav1.ObjectMeta, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: meta}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

// sameForQueue reports whether an update changed nothing the queue reads:
// the claim, the labels (state and groups) and readiness.
func sameForQueue(a, b *corev1.Node) bool {
	return a.Annotations[claim.Annotation] == b.Annotations[claim.Annotation] &&
		nodeReady(a) == nodeReady(b) && maps.Equal(a.Labels, b.Labels)
}

// stopWatch ends the watch, if any.
func (l *Lock) stopWatch() {
	l.watchMu.Lock()
	w := l.watch
	l.watch = nil
	l.watchMu.Unlock()
	if w != nil {
		w.stop()
		l.log.Debug("stopped watching the claimed nodes")
	}
}

func (l *Lock) watching() *nodeWatch {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	return l.watch
}

func (l *Lock) poke() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// Status returns the lock's current view.
func (l *Lock) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

func (l *Lock) setStatus(s Status) {
	l.mu.Lock()
	l.status = s
	l.mu.Unlock()
}

// Own reads the node's claim with a consistent GET (never a cache) and
// remembers it as the base of the next conditional write.
func (l *Lock) Own(ctx context.Context) (claim.Claim, claim.State, error) {
	n, err := l.o.Client.CoreV1().Nodes().Get(ctx, l.o.Node, metav1.GetOptions{})
	if err != nil {
		return claim.Claim{}, "", fmt.Errorf("read own node %s: %w", l.o.Node, err)
	}
	return l.remember(n)
}

func (l *Lock) remember(n *corev1.Node) (claim.Claim, claim.State, error) {
	o := ownClaim{uid: n.UID, rv: n.ResourceVersion, labels: n.Labels, annotations: n.Annotations}
	var err error
	if lv, ann := n.Labels[claim.Label], n.Annotations[claim.Annotation]; lv != "" || ann != "" {
		o.claim, err = claim.Parse(lv, ann)
		o.state = claim.State(lv)
		if err != nil {
			err = fmt.Errorf("own claim on %s: %w", l.o.Node, err)
		}
	}
	o.err = err
	l.mu.Lock()
	l.own = o
	l.mu.Unlock()
	return o.claim, o.state, err
}

// Observe takes a Node this daemon has just written by another way (the
// answer to its cordon or uncordon) as the base of its next conditional
// write. The answer is the Node as the API server stored it, as current
// as a GET, so the claim write that follows does not meet the conflict,
// re-read and retry it would otherwise cost. A Node recreated since is
// left for the next write to find.
func (l *Lock) Observe(n *corev1.Node) {
	if n == nil || n.Name != l.o.Node {
		return
	}
	if cur := l.current(); cur.uid != "" && n.UID != cur.uid {
		return
	}
	// A claim someone broke is remembered as is, as Own does; the next
	// write reports it.
	_, _, _ = l.remember(n)
}

// Known returns the claim as this daemon last read or wrote it, without a
// request.
func (l *Lock) Known() (claim.Claim, claim.State) {
	cur := l.current()
	return cur.claim, cur.state
}

// Unreadable says why the own claim, as last read or written, cannot be
// read (claim.ErrUnparsable); nil when it can, or when there is none.
func (l *Lock) Unreadable() error { return l.current().err }

// Annotation is an annotation of the own Node as last read or written
// ("" when absent), without a request.
func (l *Lock) Annotation(key string) string { return l.current().annotations[key] }

func (l *Lock) current() ownClaim {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.own
}

// errConflict: the Node changed since this daemon read it.
var errConflict = errors.New("node changed since it was read")

// write replaces the node's claim (state "" removes it), on condition that
// the Node is still at the resourceVersion this daemon last saw. The label
// and the annotation change together. An error other than errConflict
// leaves the outcome unknown: callers re-read with Own.
func (l *Lock) write(ctx context.Context, state claim.State, c claim.Claim) (claim.Claim, error) {
	cur := l.current()
	if state != "" && cur.err != nil {
		// Built on a claim this daemon cannot read (an admin's edit): what
		// it would write is a guess. Only a removal is safe.
		return claim.Claim{}, fmt.Errorf("%w: %v", ErrLost, cur.err)
	}
	var label, ann any // nil removes
	if state != "" {
		c.State = state
		// The API server's clock, as this host estimates it: the readers
		// judge a claim's age by it, each with its own estimate, so a
		// host clock that is off does not make a claim look older or
		// younger than it is.
		c.Updated = l.o.ServerNow().UTC().Truncate(time.Millisecond)
		s, err := c.Marshal()
		if err != nil {
			return claim.Claim{}, err
		}
		label, ann = string(state), s
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": cur.rv,
		"labels":          map[string]any{claim.Label: label},
		"annotations":     map[string]any{claim.Annotation: ann},
	}})
	if err != nil {
		return claim.Claim{}, err
	}
	n, err := l.o.Client.CoreV1().Nodes().Patch(ctx, l.o.Node, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "kured-host"})
	switch {
	case apierrors.IsConflict(err):
		return claim.Claim{}, errConflict
	case err != nil:
		return claim.Claim{}, fmt.Errorf("write claim %s on %s: %w", stateName(state), l.o.Node, err)
	}
	if n.UID != cur.uid && cur.uid != "" {
		return claim.Claim{}, fmt.Errorf("%w: node %s was recreated", ErrLost, l.o.Node)
	}
	l.mu.Lock()
	l.failures = 0
	l.mu.Unlock()
	got, _, err := l.remember(n)
	return got, err
}

func stateName(s claim.State) string {
	if s == "" {
		return "removal"
	}
	return string(s)
}

// Join puts the node in the queue (waiting). The queue order comes from the
// API server's clock.
func (l *Lock) Join(ctx context.Context) error {
	for {
		cur := l.current()
		if cur.state != "" {
			return nil
		}
		c := claim.Claim{Since: l.o.ServerNow().UTC().Truncate(time.Millisecond), Limits: l.o.Limits, Groups: groupValues(cur.labels, l.o.Limits.Groups)}
		_, err := l.write(ctx, claim.Waiting, c)
		if err == nil {
			l.log.Info("joined the queue for a reboot slot")
			return nil
		}
		if err := l.reread(ctx, err); err != nil {
			return err
		}
	}
}

// reread handles a failed write: a conflict or an unknown outcome means
// reading the claim again and deciding from what is really there.
func (l *Lock) reread(ctx context.Context, werr error) error {
	if errors.Is(werr, ErrLost) {
		return werr
	}
	if !errors.Is(werr, errConflict) {
		l.mu.Lock()
		l.failures++
		wait := min(200*time.Millisecond<<min(l.failures-1, 8), 30*time.Second)
		l.mu.Unlock()
		l.log.Warn("claim write failed; reading the claim again", "err", werr, "retry_in", wait)
		if err := sleep(ctx, l.jitter(wait)); err != nil {
			return err
		}
	}
	_, _, err := l.Own(ctx)
	if err != nil && !errors.Is(err, claim.ErrUnparsable) {
		return err
	}
	return nil
}

// Acquire takes a slot: from waiting it waits until eligible and
// announces; from entering it verifies, then commits, stays entering or
// steps back. It returns the holding claim, ErrNotJoined if there is no
// claim, or ErrLost if the claim disappeared.
func (l *Lock) Acquire(ctx context.Context) (claim.Claim, error) {
	backoff := 200 * time.Millisecond
	var stayingSince time.Time
	for {
		cur := l.current()
		if cur.err != nil {
			// Never announce or commit on a claim this daemon cannot
			// read (an admin's edit): the cycle decides what to do.
			return claim.Claim{}, fmt.Errorf("%w: %v", ErrLost, cur.err)
		}
		switch cur.state {
		case "":
			return claim.Claim{}, ErrNotJoined
		case claim.Holding:
			l.stopWatch()
			l.setStatus(Status{State: claim.Holding, Position: -1})
			return cur.claim, nil
		case claim.Waiting:
			stayingSince = time.Time{}
			if err := l.waitEligible(ctx); err != nil {
				return claim.Claim{}, err
			}
			if err := l.announce(ctx); err != nil {
				return claim.Claim{}, err
			}
		case claim.Entering:
			v, err := l.verify(ctx)
			if err != nil {
				return claim.Claim{}, err
			}
			switch v.Decision {
			case claim.Commit:
				if err := l.commit(ctx); err != nil {
					return claim.Claim{}, err
				}
				backoff = 200 * time.Millisecond
			case claim.Stay:
				if stayingSince.IsZero() {
					stayingSince = l.o.Now()
				}
				// Entering claims behind this one step back when they
				// verify; if they stay, their daemons are gone, and they
				// keep their units, so give way.
				if l.o.Now().Sub(stayingSince) > 5*time.Second {
					if err := l.stepBack(ctx, v.Reason+"; they have not stepped back"); err != nil {
						return claim.Claim{}, err
					}
					continue
				}
				l.setStatus(Status{State: claim.Entering, Position: -1, Reason: v.Reason})
				if err := l.waitChange(ctx, l.jitter(250*time.Millisecond)); err != nil {
					return claim.Claim{}, err
				}
			case claim.StepBack:
				if err := l.stepBack(ctx, v.Reason); err != nil {
					return claim.Claim{}, err
				}
				if err := sleep(ctx, l.jitter(backoff)); err != nil {
					return claim.Claim{}, err
				}
				backoff = min(2*backoff, 5*time.Second)
			}
		default:
			return claim.Claim{}, fmt.Errorf("own claim is in state %q, which this daemon does not write: %w", cur.state, ErrLost)
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

// waitChange waits for a change to a claimed node, or at most d.
func (l *Lock) waitChange(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-l.changed:
	case <-t.C:
	}
	return nil
}

// snapshot is the claimed nodes as the watch cache has them, or, when not
// watching, as a List served from the API server's cache has them (both
// may lag; eligibility is only about fairness, verify reads consistently),
// with this node's own claim as this daemon knows it.
func (l *Lock) snapshot(ctx context.Context) ([]claim.Participant, error) {
	var nodes []*corev1.Node
	if w := l.watching(); w != nil && !w.stale() {
		var err error
		if nodes, err = w.lister.List(labels.Everything()); err != nil {
			return nil, err
		}
	} else {
		// Not watching, or the watch failed (an outage) and client-go's
		// back-off may keep it behind for up to half a minute after the
		// API server is back: read the queue itself.
		var err error
		if nodes, err = l.listClaimed(ctx, "0"); err != nil {
			return nil, err
		}
	}
	ps := l.distrust(l.claims.participants(nodes))
	cur := l.current()
	ps = slices.DeleteFunc(ps, func(p claim.Participant) bool { return p.Name == l.o.Node })
	if cur.state != "" {
		ps = append(ps, claim.Participant{Name: l.o.Node, Labels: cur.labels, Ready: true, Claim: cur.claim})
	}
	return ps, nil
}

// listClaimed lists the claimed nodes at resourceVersion rv ("0": from
// the API server's cache; "": consistent). With Metadata it reads their
// metadata only, which is where the claims are: a whole Node is several
// times larger, and a queue of hundreds read by each of its nodes a few
// times made most of the bytes the API server sent. Readiness then comes
// from the watch cache if this daemon watches, and is taken as Ready
// otherwise: far back, a NotReady node ahead is then not passed over,
// which only makes this node wait for the window, where the watch sees
// it; an entering node that verifies without a watch may give way to it,
// which is always safe, and watches when it waits again.
func (l *Lock) listClaimed(ctx context.Context, rv string) ([]*corev1.Node, error) {
	opts := metav1.ListOptions{LabelSelector: claim.Label, ResourceVersion: rv}
	var nodes []*corev1.Node
	if l.o.Metadata == nil {
		list, err := l.o.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list claimed nodes: %w", err)
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
		return nodes, nil
	}
	list, err := l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list claimed nodes: %w", err)
	}
	w := l.watching()
	for i := range list.Items {
		ready := true
		if w != nil {
			if n, err := w.lister.Get(list.Items[i].Name); err == nil {
				ready = nodeReady(n)
			}
		}
		status := corev1.ConditionTrue
		if !ready {
			status = corev1.ConditionFalse
		}
		nodes = append(nodes, queueNode(list.Items[i].ObjectMeta, status))
	}
	return nodes, nil
}

// Participants turns Nodes into the rules' view of them, as another node's
// lock sees them: one Participant for each Node with a claim label or
// annotation (what cannot be read is kept, with Err set), each judged by
// claim.Plausible against serverNow (the API server's clock) and
// tolerance (the stated clock tolerance); Nodes without a claim are left
// out.
func Participants(nodes []*corev1.Node, serverNow time.Time, tolerance time.Duration) []claim.Participant {
	var none claimCache
	ps := none.participants(nodes)
	for i, p := range ps {
		ps[i] = claim.Plausible(p, serverNow, tolerance)
	}
	return ps
}

// distrust judges every other node's claim in ps by claim.Plausible (this
// node's own claim is left as read: the daemon knows what it wrote). It
// runs on every read, after the cache of parsed claims, because the
// verdict depends on the time and on the Nodes' labels, not only on the
// claim.
func (l *Lock) distrust(ps []claim.Participant) []claim.Participant {
	now := l.o.ServerNow()
	for i, p := range ps {
		if p.Name != l.o.Node {
			ps[i] = claim.Plausible(p, now, l.o.ClockTolerance)
		}
	}
	return ps
}

// claimCache keeps each node's claim as last parsed, with the label and
// annotation it was parsed from. A waiting daemon near the front reads the
// whole queue on every change to it; parsing every claim every time was
// most of its CPU in a queue of hundreds. The claims it returns share
// their maps and slices between calls: the rules only read them.
type claimCache struct {
	mu     sync.Mutex
	parsed map[string]parsedClaim // node name -> its last parse
}

type parsedClaim struct {
	label, annotation string
	claim             claim.Claim
	err               error
}

func (cc *claimCache) participants(nodes []*corev1.Node) []claim.Participant {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	// Rebuilt from the nodes each time, so that a node gone from the
	// queue is forgotten.
	next := make(map[string]parsedClaim, len(nodes))
	ps := make([]claim.Participant, 0, len(nodes))
	for _, n := range nodes {
		lv, ann := n.Labels[claim.Label], n.Annotations[claim.Annotation]
		if lv == "" && ann == "" {
			continue
		}
		p, ok := cc.parsed[n.Name]
		if !ok || p.label != lv || p.annotation != ann {
			p = parsedClaim{label: lv, annotation: ann}
			p.claim, p.err = claim.Parse(lv, ann)
		}
		next[n.Name] = p
		ps = append(ps, claim.Participant{Name: n.Name, Labels: n.Labels, Ready: nodeReady(n), Claim: p.claim, Err: p.err})
	}
	cc.parsed = next
	return ps
}

// readyStatus is n's Ready condition's status ("" when it has none).
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitEligible blocks until this node is admitted by the queue. Near the
// front of the queue it watches the claimed nodes and wakes on every
// change, so a freed slot is taken as soon as the watch delivers the
// release. Further back it does not watch: it reads the queue now and
// then (farPace), a few times per wait however long the queue.
func (l *Lock) waitEligible(ctx context.Context) error {
	var far farPace
	for {
		snap, err := l.snapshot(ctx)
		if err != nil {
			return err
		}
		now, server := l.o.Now(), l.o.ServerNow()
		q := claim.EligibilityUpTo(snap, server, l.o.TTL, l.silent(now), l.o.Node)
		l.noteEligible(q, now)
		l.raiseAlarms(ctx, snap, server)
		if q.Eligible(l.o.Node) {
			return nil
		}
		reason := q.Blocked[l.o.Node]
		if reason == "" {
			reason = "waiting for the nodes ahead"
		}
		pos := q.Position(l.o.Node)
		l.setStatus(Status{State: claim.Waiting, Position: pos, Reason: reason})
		if l.current().state != claim.Waiting {
			return nil
		}
		// Far back counts only the waiting nodes ahead that are not
		// passed over (NotReady, silent): a front of dead nodes must not
		// keep every other node far back.
		var counted []string
		for _, n := range q.Waiting[:max(pos, 0)] {
			if _, skipped := q.Skipped[n]; !skipped {
				counted = append(counted, n)
			}
		}
		if window := l.window(); len(counted) >= window {
			l.stopWatch()
			ahead := len(counted) - window + 1
			left, err := l.waitFar(ctx, &far, ahead, markOf(snap, counted[len(counted)-window]), now, snap)
			if err != nil {
				return err
			}
			if left {
				// Most likely within the window now, where it
				// watches: the watch's List is the read of the queue.
				if err := l.ensureWatch(ctx); err != nil {
					return err
				}
			}
			continue
		}
		if l.watching() == nil {
			if err := l.ensureWatch(ctx); err != nil {
				return err
			}
			continue // look again from the fresh cache
		}
		// Re-check at least now and then: the grace for silent nodes
		// and the alarms are about time, not changes.
		if err := l.waitChange(ctx, l.jitter(min(l.o.WaitingGrace/4, 15*time.Second)+time.Second)); err != nil {
			return err
		}
	}
}

// waitFar waits, far back in the queue, until this node may have come
// within the window, and reports whether the mark has left. Reading the
// whole queue costs a response the size of the queue, and every waiting
// node reading it on each wake-up made a long queue's bytes grow with its
// square (0.5 MB a read, 2.8 GB in all at 500 nodes); polling in between
// came late, and a node that comes to the front asleep idles a slot until
// the others pass it over. So it watches one node, the mark: the waiting
// node whose leaving, with the queue going in order, brings this one
// within the window. The queue is read again when the mark has left, or
// when at the fastest pace seen this node should be within the window by
// now (a mark held back by its group, or passed over, stays), or, while
// the pace is not known, after a minute: the read when the mark leaves
// measures the pace over the whole wait, where reads every few seconds
// from the start measured a start slowed by every node joining at once
// (and made it slower).
func (l *Lock) waitFar(ctx context.Context, far *farPace, ahead int, mark participantMark, read time.Time, snap []claim.Participant) (bool, error) {
	d := far.next(ahead, read)
	l.log.Debug("far back in the queue", "ahead", ahead, "mark", mark.name, "next_read_in", d)
	if mark.name == "" {
		return false, sleep(ctx, d)
	}
	// The nodes ahead may be held back by their group (a full zone) while
	// this one's is free: then the mark does not move, and a slot freed
	// elsewhere is this node's to take. The active claims are few: they
	// are read now and then (farPoll), and, when they changed, the queue
	// is worked out again from the last read with them; a full read
	// follows only if this node may now go.
	poll := time.NewTimer(l.jitter(farPoll))
	defer poll.Stop()
	view := newFarView(snap)
	timeout := time.Minute
	if far.perPosition > 0 {
		timeout = farBounds(far.eta(ahead))
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := l.watchMark(wctx, mark.name)
	if err != nil {
		// Not worth a warning: paced reads of the queue do the job,
		// and report the API's errors if they last.
		l.log.Debug("cannot watch the mark; reading the queue at a pace instead", "mark", mark.name, "err", err)
		return false, sleep(ctx, d)
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return false, context.Cause(ctx)
			}
			return false, nil // the time is up: read the queue
		case <-poll.C:
			if l.mayGoNow(ctx, view) {
				return true, nil
			}
			poll.Reset(l.jitter(farPoll))
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			if ev.Type == watch.Deleted {
				return true, nil
			}
			if m, ok := ev.Object.(metav1.Object); ok && markLeft(m, mark) {
				return true, nil
			}
		}
	}
}

// farPoll is how often a node far back in the queue reads the active
// claims: with the read, within 2·farPoll of a slot freed that it may
// take (the bound docs/claims.md states).
const farPoll = 15 * time.Second

// activeSelector selects the nodes whose claim takes a slot.
var activeSelector = claim.Label + " in (" + string(claim.Entering) + "," + string(claim.Holding) + ")"

// farView is what a node far back knows between two reads of the queue:
// the last read, the nodes seen active since, and the readiness of the
// nodes ahead that seemed to hold it up.
type farView struct {
	snap []claim.Participant
	// went are the nodes waiting in snap seen active since: a reboot
	// takes minutes, far longer than farPoll, so a node that took a slot
	// and gave it back has been seen.
	went map[string]bool
	// read are the waiting nodes ahead that the view let go while this
	// node could not, each read once since (its claim may have changed
	// between two reads of the active claims: removed and joined again
	// behind; and a read of metadata does not show readiness).
	read map[string]bool
	// letGo are the nodes read that the view let go at the last read of
	// the active claims. A Ready node let go takes its slot within a
	// second, so one still not active at the next read did not go as
	// read: an admin removed its claim, or its machine failed, between
	// the two reads. It is read again.
	letGo map[string]bool
}

func newFarView(snap []claim.Participant) *farView {
	return &farView{snap: slices.Clone(snap), went: map[string]bool{}, read: map[string]bool{}, letGo: map[string]bool{}}
}

// update replaces node name's participant in the view with what a read of
// its Node showed (none: it has no claim any more).
func (v *farView) update(name string, p []claim.Participant) {
	v.snap = slices.DeleteFunc(v.snap, func(q claim.Participant) bool { return q.Name == name })
	v.snap = append(v.snap, p...)
}

// queue works out the queue from the last read with the active claims
// read now.
func (v *farView) queue(l *Lock, active []claim.Participant) claim.Queue {
	view := make([]claim.Participant, 0, len(v.snap)+len(active))
	for _, p := range v.snap {
		if p.Claim.State == claim.Waiting && (!v.went[p.Name] || v.read[p.Name]) {
			view = append(view, p)
		}
	}
	view = append(view, active...)
	return claim.EligibilityUpTo(view, l.o.ServerNow(), l.o.TTL, l.silent(l.o.Now()), l.o.Node)
}

// mayGoNow reads the active claims and reports whether, with them in
// place of those of the last read of the queue, this node would be
// eligible. Waiting nodes ahead that the view lets go take the free slots,
// unless they are NotReady or no longer where the view has them: each is
// read once (a GET from the API server's cache), its claim and readiness
// taken from the read, so that a NotReady one is passed over as the nodes
// that watch pass it over. A failed read says no: the next one, or the
// mark, tells.
func (l *Lock) mayGoNow(ctx context.Context, v *farView) bool {
	opts := metav1.ListOptions{LabelSelector: activeSelector, ResourceVersion: "0"}
	var nodes []*corev1.Node
	if l.o.Metadata != nil {
		list, err := l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, opts)
		if err != nil {
			return false
		}
		for i := range list.Items {
			nodes = append(nodes, queueNode(list.Items[i].ObjectMeta, corev1.ConditionTrue))
		}
	} else {
		list, err := l.o.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return false
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
	}
	active := l.distrust(Participants(nodes, l.o.ServerNow(), l.o.ClockTolerance))
	for _, a := range active {
		// Seen active: what an earlier read showed of it is past.
		v.went[a.Name] = true
		delete(v.read, a.Name)
	}
	for n := range v.letGo {
		delete(v.read, n) // not active: the read is past too
	}
	clear(v.letGo)
	q := v.queue(l, active)
	if !q.Eligible(l.o.Node) {
		changed := false
		for _, n := range q.Waiting {
			if n == l.o.Node {
				break
			}
			if v.read[n] || !q.Eligible(n) {
				continue
			}
			node, err := l.o.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{ResourceVersion: "0"})
			if err != nil {
				continue
			}
			v.read[n], changed = true, true
			v.update(n, l.distrust(Participants([]*corev1.Node{queueNode(node.ObjectMeta, readyStatus(node))}, l.o.ServerNow(), l.o.ClockTolerance)))
		}
		if changed {
			q = v.queue(l, active)
		}
		for _, n := range q.Waiting {
			if n == l.o.Node {
				break
			}
			if v.read[n] && q.Eligible(n) {
				v.letGo[n] = true
			}
		}
	}
	l.log.Debug("far back: the active claims read", "active", len(active), "eligible", q.Eligible(l.o.Node), "blocked_by", q.Blocked[l.o.Node])
	return q.Eligible(l.o.Node)
}

// watchMark watches one Node's metadata, from its current state.
func (l *Lock) watchMark(ctx context.Context, name string) (watch.Interface, error) {
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: "0"}
	if l.o.Metadata != nil {
		return l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).Watch(ctx, opts)
	}
	return l.o.Client.CoreV1().Nodes().Watch(ctx, opts)
}

// participantMark is a waiting node as one read of the queue saw it.
type participantMark struct {
	name  string
	since time.Time
}

func markOf(snap []claim.Participant, name string) participantMark {
	for _, p := range snap {
		if p.Name == name {
			return participantMark{name: name, since: p.Claim.Since}
		}
	}
	return participantMark{}
}

// markLeft reports whether the mark is no longer waiting in the place it
// had: no claim, another state, or a new place (it left and came back).
func markLeft(n metav1.Object, m participantMark) bool {
	c, err := claim.Parse(n.GetLabels()[claim.Label], n.GetAnnotations()[claim.Annotation])
	return err != nil || c.State != claim.Waiting || !c.Since.Equal(m.since)
}

// window is how many of the first waiting nodes watch: enough that the
// next ones to go hear of a freed slot at once, with room for nodes passed
// over or blocked by a full group, and never fewer than 16, so that in
// most clusters every waiting node watches and the slots go strictly in
// queue order; only long queues pace their tails.
func (l *Lock) window() int { return max(2*max(l.o.Limits.Concurrency, 1)+2, minWindow) }

const minWindow = 16

// farPace measures, for a node further back than the window, the fastest
// pace the queue has moved between two of its reads (a queue slowed by a
// busy start speeds up later, and a pace measured across the start is
// slow: reading early costs a read, reading late idles a slot), and
// spaces the reads when the mark cannot be watched: while the queue has
// not been seen to move, doubling from 2 s up to a minute; then a quarter
// of the time it needs to reach the window at that pace. Between 1 s and
// 30 min.
type farPace struct {
	ahead       int
	at          time.Time
	interval    time.Duration
	perPosition time.Duration // fastest seen; 0 until the queue moved
}

func (f *farPace) next(ahead int, now time.Time) time.Duration {
	if !f.at.IsZero() && f.ahead > ahead && now.After(f.at) {
		p := now.Sub(f.at) / time.Duration(f.ahead-ahead)
		if f.perPosition == 0 || p < f.perPosition {
			f.perPosition = p
		}
	}
	var d time.Duration
	switch {
	case f.perPosition > 0:
		d = f.eta(ahead) / 4
	case f.interval == 0:
		d = 2 * time.Second
	default:
		d = min(2*f.interval, time.Minute)
	}
	d = farBounds(d)
	f.ahead, f.at, f.interval = ahead, now, d
	return d
}

// eta is the time to move ahead places at the fastest pace seen.
func (f *farPace) eta(ahead int) time.Duration { return f.perPosition * time.Duration(ahead) }

// farBounds keeps a far-back wait between 1 s and 30 min.
func farBounds(d time.Duration) time.Duration { return min(max(d, time.Second), 30*time.Minute) }

// silent reports waiting nodes that have been eligible (in this daemon's
// view) for longer than the grace without announcing.
func (l *Lock) silent(now time.Time) func(string) bool {
	l.mu.Lock()
	first := copyTimes(l.firstEligible)
	l.mu.Unlock()
	return func(name string) bool {
		t, ok := first[name]
		return ok && name != l.o.Node && l.o.WaitingGrace > 0 && now.Sub(t) > l.o.WaitingGrace
	}
}

func copyTimes(m map[string]time.Time) map[string]time.Time {
	c := make(map[string]time.Time, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// noteEligible records when each other waiting node became eligible (or
// was passed over for its silence) and has stayed so, and forgets the
// others: a node that was NotReady, or held back by a limit, starts its
// grace afresh once it may go (it was passed over at once, the grace long
// spent, when it came back).
func (l *Lock) noteEligible(q claim.Queue, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, name := range q.Waiting {
		why, skipped := q.Skipped[name]
		if q.Eligible(name) || (skipped && why == claim.SkippedSilent) {
			if l.firstEligible[name].IsZero() {
				l.firstEligible[name] = now
			}
			continue
		}
		delete(l.firstEligible, name)
	}
	for name := range l.firstEligible {
		if !slices.Contains(q.Waiting, name) {
			delete(l.firstEligible, name)
		}
	}
}

// AlarmReporter is told about claims that keep their place longer than
// they should.
type AlarmReporter interface {
	// Raise is called once for each new alarm.
	Raise(ctx context.Context, a claim.Alarm)
	// Current is called with every alarm each time the lock looks.
	Current(alarms []claim.Alarm)
}

// raiseAlarms reports each alarm once, when it first appears.
func (l *Lock) raiseAlarms(ctx context.Context, snap []claim.Participant, now time.Time) {
	alarms := claim.Alarms(snap, now, l.o.AlarmAge, l.o.EnteringAlarmAge)
	l.mu.Lock()
	seen := map[string]bool{}
	var fresh []claim.Alarm
	for _, a := range alarms {
		key := a.Node + "/" + string(a.State)
		seen[key] = true
		if !l.alarmed[key] {
			fresh = append(fresh, a)
		}
	}
	l.alarmed = seen
	l.mu.Unlock()
	for _, a := range fresh {
		l.log.Warn("claim alarm: node "+a.Node+" "+a.What, "node", a.Node, "state", string(a.State), "age", a.Age.Round(time.Second))
		if l.o.Alarms != nil {
			l.o.Alarms.Raise(ctx, a)
		}
	}
	if l.o.Alarms != nil {
		l.o.Alarms.Current(alarms)
	}
}

// published is what this node publishes when announcing: the stricter of
// its configuration and what its claim published before (a restarted
// daemon with a laxer configuration keeps its published limits until it
// releases).
func (l *Lock) published(prev claim.Limits) claim.Limits {
	out := claim.Limits{Concurrency: l.o.Limits.Concurrency, Groups: slices.Clone(l.o.Limits.Groups)}
	if prev.Concurrency > 0 && prev.Concurrency < out.Concurrency {
		out.Concurrency = prev.Concurrency
	}
	for _, g := range prev.Groups {
		i := slices.IndexFunc(out.Groups, func(o claim.GroupLimit) bool { return o.Label == g.Label })
		switch {
		case i < 0:
			out.Groups = append(out.Groups, g)
		case g.Max < out.Groups[i].Max:
			out.Groups[i].Max = g.Max
		}
	}
	return out
}

// groupValues are the node's values of the labels the rules name.
func groupValues(labels map[string]string, rules []claim.GroupLimit) map[string]string {
	vs := map[string]string{}
	for _, g := range rules {
		if v, ok := labels[g.Label]; ok {
			vs[g.Label] = v
		}
	}
	return vs
}

// announce writes entering, freezing the published limits and the node's
// group label values.
func (l *Lock) announce(ctx context.Context) error {
	for {
		cur := l.current()
		if cur.state != claim.Waiting {
			return nil
		}
		c := cur.claim
		c.Limits = l.published(c.Limits)
		c.Groups = groupValues(cur.labels, c.Limits.Groups)
		_, err := l.write(ctx, claim.Entering, c)
		if err == nil {
			l.log.Info("eligible: announcing (entering)")
			return nil
		}
		if err := l.reread(ctx, err); err != nil {
			return err
		}
	}
}

// verify reads a consistent snapshot (a List served from etcd's current
// revision, never a cache) and decides. It also checks that the claim in
// that snapshot is still the one this daemon announced.
func (l *Lock) verify(ctx context.Context) (claim.Verdict, error) {
	cur := l.current()
	if want := l.published(cur.claim.Limits); !limitsEqual(want, cur.claim.Limits) {
		// The configuration got stricter since the announce (a restart
		// with a new config): announce the stricter limits before
		// verifying against them.
		c := cur.claim
		c.Limits = want
		if _, err := l.write(ctx, claim.Entering, c); err != nil {
			return claim.Verdict{Decision: claim.Stay}, l.reread(ctx, err)
		}
		cur = l.current()
	}
	nodes, err := l.listClaimed(ctx, "")
	if err != nil {
		return claim.Verdict{}, fmt.Errorf("verify: %w", err)
	}
	var self *corev1.Node
	for _, n := range nodes {
		if n.Name == l.o.Node {
			self = n
		}
	}
	if self == nil || self.UID != cur.uid || self.Labels[claim.Label] != string(claim.Entering) ||
		self.Annotations[claim.Annotation] != mustMarshal(cur.claim) {
		// Not the entering claim we announced, label and annotation (an
		// admin may have edited the label alone): never commit on it;
		// decide from what is really there.
		l.log.Warn("own claim changed under this daemon; reading it again")
		if err := l.reread(ctx, errConflict); err != nil {
			return claim.Verdict{}, err
		}
		return claim.Verdict{Decision: claim.Stay}, nil
	}
	l.mu.Lock()
	l.own.rv = self.ResourceVersion
	l.mu.Unlock()
	ps := l.distrust(l.claims.participants(nodes))
	var me claim.Participant
	for _, p := range ps {
		if p.Name == l.o.Node {
			me = p
		}
	}
	now, server := l.o.Now(), l.o.ServerNow()
	l.raiseAlarms(ctx, ps, server)
	v := claim.Verify(me, l.o.Limits, ps, server, l.o.TTL)
	if v.Decision != claim.StepBack {
		// Fairness: a node that announced from a stale view gives way to
		// a waiting node whose turn it is. Stepping back is always safe.
		if yield, why := claim.Yield(me, ps, server, l.o.TTL, l.silent(now)); yield {
			return claim.Verdict{Decision: claim.StepBack, Reason: why}, nil
		}
	}
	return v, nil
}

func mustMarshal(c claim.Claim) string {
	s, err := c.Marshal()
	if err != nil {
		return ""
	}
	return s
}

func limitsEqual(a, b claim.Limits) bool {
	return a.Concurrency == b.Concurrency && slices.Equal(a.Groups, b.Groups)
}

// commit writes holding, with the boot ID of this boot, conditional on the
// Node being as the verify read it.
func (l *Lock) commit(ctx context.Context) error {
	cur := l.current()
	boot, err := l.o.BootID()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	c := cur.claim
	now := l.o.ServerNow().UTC().Truncate(time.Millisecond)
	c.Acquired, c.BootID, c.Phase = &now, boot, claim.PhaseAcquired
	if _, err := l.write(ctx, claim.Holding, c); err != nil {
		return l.reread(ctx, err)
	}
	l.log.Info("took a reboot slot (holding)")
	return nil
}

// stepBack returns to waiting, keeping the place in the queue.
func (l *Lock) stepBack(ctx context.Context, reason string) error {
	cur := l.current()
	l.log.Info("stepping back to waiting", "reason", reason)
	if _, err := l.write(ctx, claim.Waiting, cur.claim); err != nil {
		return l.reread(ctx, err)
	}
	l.setStatus(Status{State: claim.Waiting, Position: -1, Reason: reason})
	return nil
}

// Update changes the holder's claim (phase, boot ID, ...) with a
// conditional write; it fails with ErrLost if the claim is no longer this
// node's holding claim.
func (l *Lock) Update(ctx context.Context, change func(*claim.Claim)) (claim.Claim, error) {
	for {
		cur := l.current()
		if cur.state != claim.Holding {
			return claim.Claim{}, fmt.Errorf("update claim: it is %q: %w", stateName(cur.state), ErrLost)
		}
		c := cur.claim
		change(&c)
		got, err := l.write(ctx, claim.Holding, c)
		if err == nil {
			return got, nil
		}
		if err := l.reread(ctx, err); err != nil {
			return claim.Claim{}, err
		}
	}
}

// Confirm checks with a consistent GET that the node still holds its slot
// (same Node object, claim holding) before a disruptive step.
func (l *Lock) Confirm(ctx context.Context) (claim.Claim, error) {
	before := l.current()
	c, state, err := l.Own(ctx)
	if err != nil {
		return claim.Claim{}, err
	}
	after := l.current()
	if state != claim.Holding || (before.uid != "" && after.uid != before.uid) {
		return claim.Claim{}, fmt.Errorf("confirm slot: the claim is %q: %w", stateName(state), ErrLost)
	}
	return c, nil
}

// Release removes the claim (label and annotation together), from any
// state: after the reboot, or to leave the queue.
func (l *Lock) Release(ctx context.Context) error {
	for {
		cur := l.current()
		if cur.state == "" {
			return nil
		}
		_, err := l.write(ctx, "", claim.Claim{})
		if err == nil {
			l.stopWatch()
			l.log.Info("released the claim", "was", string(cur.state))
			l.setStatus(Status{Position: -1})
			return nil
		}
		if err := l.reread(ctx, err); err != nil {
			return err
		}
	}
}

// ReleaseAfter keeps the slot for the release delay, then releases. The
// end of the delay is written into the claim first, so that a restarted
// daemon waits only what is left rather than starting over or cutting it
// short.
func (l *Lock) ReleaseAfter(ctx context.Context, delay time.Duration) error {
	c, state := l.Known()
	if state == claim.Holding && delay > 0 {
		if c.ReleaseAt == nil {
			end := l.o.Now().Add(delay).UTC().Truncate(time.Millisecond)
			var err error
			c, err = l.Update(ctx, func(c *claim.Claim) { c.Phase, c.ReleaseAt = claim.PhaseReleasing, &end })
			if err != nil {
				return err
			}
		}
		if wait := c.ReleaseAt.Sub(l.o.Now()); wait > 0 {
			l.log.Info("holding the slot for the release delay", "left", wait.Round(time.Second))
			if err := sleep(ctx, wait); err != nil {
				return err
			}
		}
	}
	return l.Release(ctx)
}

// LimitsFrom turns the configuration's lock section into the limits a
// node publishes.
func LimitsFrom(cfg config.LockConfig) claim.Limits {
	l := claim.Limits{Concurrency: cfg.Concurrency}
	for _, g := range cfg.Groups {
		l.Groups = append(l.Groups, claim.GroupLimit{Label: g.Label, Max: g.Max})
	}
	return l
}
