package lock

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/queue"
)

// nodeWatch is the watch of a node in the front of the queue: one
// informer on the front (frontSelector: its waiting nodes and the active
// ones that came through it), one on the other active claims
// (activeBesideFrontSelector), one on the waiting ones that publish other
// limits than this node's (otherLimitsSelector). They are few, where the
// claimed nodes are the whole queue.
type nodeWatch struct {
	// own is the digest of the limits it was set up for.
	own string
	// started is when it started: a view of the queue read before may
	// miss what changed before its caches filled.
	started time.Time
	parts   []*watchPart
	// front is the part that watches the front (frontSelector).
	front *watchPart
	stop  func()
	mu    sync.Mutex
	// lastEvent is when it last delivered a change (or filled its cache).
	lastEvent time.Time
	now       func() time.Time
}

// watchPart is one informer. brokenAt is its resourceVersion when its
// watch last failed: until it moves on, the cache may be behind by the
// length of an outage and client-go's back-off. failedAt is when it last
// failed: a watch that fails again and again (resumed from a version the
// server has compacted away, 410, each relist served from a cache behind
// it) moves its version on every relist without catching up.
type watchPart struct {
	inf      cache.SharedIndexInformer
	streams  kube.Streams
	broken   bool // guarded by nodeWatch.mu
	brokenAt string
	failedAt time.Time
}

// list is what the informers hold, each node once, as the newest
// version any of them has (a node whose front label an admin removed
// while it holds a slot moves from one cache to another, which may lag).
func (w *nodeWatch) list() []*corev1.Node {
	var out []*corev1.Node
	at := map[string]int{}
	for _, p := range w.parts {
		for _, n := range p.nodes() {
			i, seen := at[n.Name]
			switch {
			case !seen:
				at[n.Name] = len(out)
				out = append(out, n)
			case newer(n.ResourceVersion, out[i].ResourceVersion):
				out[i] = n
			}
		}
	}
	return out
}

// nodes is what the informer's cache holds.
func (p *watchPart) nodes() []*corev1.Node {
	var out []*corev1.Node
	for _, obj := range p.inf.GetIndexer().List() {
		if n, ok := obj.(*corev1.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// newer reports whether resourceVersion a is later than b. They are
// opaque to clients, but the API server's are etcd's revisions, decimal
// integers; anything else is not taken as newer.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

func (w *nodeWatch) synced() bool {
	for _, p := range w.parts {
		if !p.inf.HasSynced() {
			return false
		}
	}
	return true
}

// watchQuiet is how long a watch may deliver nothing before the front is
// read directly once: a watch can stall without failing (resumed after a
// compaction, behind a lagging cache). It is the slow resync: a slot
// freed in a quiet front wakes the watch anyway.
const watchQuiet = queue.ResyncEvery

// quiet reports whether the watch has delivered nothing for watchQuiet,
// and counts the read it calls for as an event: the next is due a
// watchQuiet later.
func (w *nodeWatch) quiet() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.now().Sub(w.lastEvent) < watchQuiet {
		return false
	}
	w.lastEvent = w.now()
	return true
}

// watchSettle is how long a watch must go without failing before its
// cache is trusted again.
const watchSettle = 10 * time.Second

// stale reports whether an informer has not filled its cache yet, has no
// watch open (it ended, and the informer waits out its back-off before it
// lists again), or failed and has not caught up since (its version moved
// on and it has not failed for watchSettle).
func (w *nodeWatch) stale() bool {
	if !w.synced() {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	stale := false
	for _, p := range w.parts {
		if p.broken && p.inf.LastSyncResourceVersion() != p.brokenAt && w.now().Sub(p.failedAt) >= watchSettle {
			p.broken = false
		}
		stale = stale || p.broken || !p.streams.Open()
	}
	return stale
}

// streamGap is how long a watch stream that ended may go without a
// successor before a node waiting on it looks again.
const streamGap = time.Second

// syncWait is how long ensureWatch waits for the watch's cache to fill.
// Started during an outage of the API server, its first List waits out
// client-go's back-off (up to half a minute) after the server is back:
// meanwhile the watch is stale and the queue is read directly, so that a
// waiting node still takes a free slot within the bound docs/claims.md
// states.
const syncWait = 2 * time.Second

// ensureWatch starts the watch of the claims that bind this node if it is
// not running, and returns once its caches are filled, or after syncWait
// with them still filling (stale).
func (l *Lock) ensureWatch(ctx context.Context) error {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	if l.watch != nil {
		return nil
	}
	own := l.current().claim.Limits
	nw, err := l.newNodeWatch(own)
	if err != nil {
		return fmt.Errorf("watch claimed nodes: %w", err)
	}
	base := l.base
	if base == nil {
		base = ctx
	}
	wctx, cancel := context.WithCancel(base)
	var wg sync.WaitGroup
	for _, p := range nw.parts {
		wg.Go(func() { p.inf.RunWithContext(wctx) })
	}
	stop := func() {
		cancel()
		wg.Wait()
	}
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		cache.WaitForCacheSync(wctx.Done(), nw.synced)
	}()
	wait := time.NewTimer(syncWait)
	defer wait.Stop()
	select {
	case <-synced:
	case <-ctx.Done():
		stop()
		return context.Cause(ctx)
	case <-wait.C:
		l.log.Debug("the watch of the claimed nodes is still filling its cache; reading the queue directly meanwhile")
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

// newNodeWatch builds the watch of a node in the front that publishes
// limits own, an informer for each selector, not yet running: Node
// metadata when Metadata is set (readiness is read apart: queue.Front asks for it),
// slimmed objects, a broken watch remembered, a wake-up only for a change
// the queue reads.
func (l *Lock) newNodeWatch(own claim.Limits) (*nodeWatch, error) {
	nw := &nodeWatch{own: claim.LimitsDigest(own), now: l.o.Now, started: l.o.Now()}
	selectors := []string{frontSelector, activeBesideFrontSelector, otherLimitsSelector(own)}
	notify := func(any) {
		nw.mu.Lock()
		nw.lastEvent = nw.now()
		nw.mu.Unlock()
		l.poke()
	}
	for _, sel := range selectors {
		// Informers on Nodes, not a SharedInformerFactory, which
		// would link every API group's informers into the binary.
		lw, example := kube.NodeListWatch(l.o.Client, l.o.Metadata, kube.ByLabels(sel))
		p := &watchPart{}
		// A stream that ended leaves the cache silently behind until
		// the reflector lists again, after its back-off: a node that
		// waits on the watch must look again then, and read the front
		// directly while no stream is open, or a slot freed meanwhile
		// waits for that back-off. Not at once: the reflector opens the
		// next stream straight away after a server's timeout, and a
		// read for each would be a List more.
		p.streams.Ended = func() {
			time.AfterFunc(streamGap, func() {
				if !p.streams.Open() {
					l.poke()
				}
			})
		}
		p.streams.Track(lw)
		inf := cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{})
		if err := inf.SetTransform(slim); err != nil {
			return nil, err
		}
		p.inf = inf
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			nw.mu.Lock()
			p.broken, p.brokenAt, p.failedAt = true, inf.LastSyncResourceVersion(), nw.now()
			nw.mu.Unlock()
			l.poke() // stale now: the front is read directly
			cache.DefaultWatchErrorHandler(ctx, r, err)
		}); err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: notify, DeleteFunc: notify,
			UpdateFunc: func(o, n any) {
				// The kubelet's status reports change nothing the
				// queue reads: wake only for a claim or readiness
				// that changed.
				if on, ok := o.(*corev1.Node); ok {
					if nn, ok := n.(*corev1.Node); ok && sameForQueue(on, nn) {
						return
					}
				}
				notify(n)
			},
		}); err != nil {
			return nil, err
		}
		nw.parts = append(nw.parts, p)
	}
	nw.front = nw.parts[0]
	return nw, nil
}

// announceSeen is how long the verify waits for the watch of the front
// to deliver the announce before it reads the front with a List: the
// event comes a few milliseconds after the write's reply.
const announceSeen = 500 * time.Millisecond

// frontAfter is the front as the watch holds it once its cache holds
// this node's announce (cur), waiting announceSeen at most: the front at
// a revision after the announce, as the verify's List of the front was.
// (A node announces with its front label, and keeps it through its slot,
// so each change of a member's is in this one watch, in order.) False
// without a live watch, or one later than that.
func (l *Lock) frontAfter(ctx context.Context, cur ownClaim) ([]*corev1.Node, bool) {
	w := l.watching()
	if w == nil {
		return nil, false
	}
	t := time.NewTimer(announceSeen)
	defer t.Stop()
	for {
		if w.stale() {
			return nil, false
		}
		nodes := w.front.nodes()
		if announced(nodes, l.o.Node, cur) != nil {
			return nodes, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-t.C:
			return nil, false
		case <-l.changed:
			// A change the verify's Lists show anyway.
		}
	}
}

// slim keeps of a watched Node what the queue reads (name, labels,
// annotations, the Ready condition): a real Node's status (its images,
// above all) and managed fields would take most of the cache. A Node's
// metadata becomes a Node taken as Ready (queue.Front.Readiness corrects it).
func slim(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		meta := m.ObjectMeta
		meta.ManagedFields = nil
		return queueNode(*meta.DeepCopy(), corev1.ConditionTrue), nil
	}
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
		queue.NodeReady(a) == queue.NodeReady(b) && maps.Equal(a.Labels, b.Labels)
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
