package steer

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/kured-host/kured-host/daemon/kube"
)

// Watch keeps the orders as the API server last sent them: the cluster's
// ConfigMap and this node's labels and annotations, each watched by name.
// A waiting node looks at its orders at every recheck; a GET for each
// look made a node's cost grow with the length of its wait, and a roll's
// with the square of its nodes. Until a watch has filled its cache, or
// while it is failing, or when the node may not watch (an RBAC applied
// before the grant had the verb), a look reads the object as before. The
// look right before an announce always reads fresh (it does not use the
// watch).
//
// A watch that stalls without failing is not read past its end: client-go
// asks each watch to end after 5 to 10 minutes and resumes it from its
// resourceVersion.
type Watch struct {
	Client kubernetes.Interface
	// Metadata, when set, watches the Node's metadata only (a hold is
	// labels and annotations); else whole Nodes.
	Metadata metadata.Interface
	Node     string
	Log      *slog.Logger
	// OnChange, when set, is called when an order may have changed (the
	// ConfigMap's data, the Node's hold): a node that waits on a pause
	// or a hold looks again at once, not at its next recheck. Set it
	// before Run.
	OnChange func()

	once     sync.Once
	cm, node *watched
}

// watched is one informer and whether its cache can be read.
type watched struct {
	inf     cache.SharedIndexInformer
	streams kube.Streams
	mu      sync.Mutex
	// failing: its last List or watch failed, at brokenAt (its
	// resourceVersion then), and no List has succeeded since.
	failing  bool
	brokenAt string
	// refused: the API server forbids it; the informer is stopped.
	refused bool
}

// Run watches until ctx ends. It returns at once; the Watch is read
// directly (by GET) until its caches fill.
func (w *Watch) Run(ctx context.Context) {
	w.once.Do(func() {
		w.cm = w.start(ctx, "the ConfigMap "+Namespace+"/"+Name, w.configMapListWatch(), &corev1.ConfigMap{})
		lw, example := kube.NodeListWatch(w.Client, w.Metadata, kube.ByName(w.Node))
		w.node = w.start(ctx, "its Node", lw, example)
	})
}

func (w *Watch) start(ctx context.Context, what string, lw *cache.ListWatch, example runtime.Object) *watched {
	wd := &watched{}
	wd.streams.Track(lw)
	wd.inf = cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{})
	ictx, cancel := context.WithCancel(ctx)
	log := w.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_ = wd.inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		if n, ok := obj.(*corev1.Node); ok {
			// A hold is in the metadata: the status (images,
			// conditions) would take most of the cache.
			return &corev1.Node{ObjectMeta: n.ObjectMeta}, nil
		}
		return obj, nil
	})
	_ = wd.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		wd.mu.Lock()
		wd.failing, wd.brokenAt = true, wd.inf.LastSyncResourceVersion()
		refused := apierrors.IsForbidden(err) && !wd.refused
		wd.refused = wd.refused || apierrors.IsForbidden(err)
		wd.mu.Unlock()
		if refused {
			log.Warn("may not watch "+what+"; reading it at each look instead", "err", err,
				"fix", "`kured-host rbac | kubectl apply -f -` grants list and watch on it")
			cancel()
			return
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if w.OnChange != nil {
		changed := func(any) { w.OnChange() }
		_, _ = wd.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: changed, DeleteFunc: changed,
			UpdateFunc: func(o, n any) {
				if !sameOrders(o, n) {
					w.OnChange()
				}
			},
		})
	}
	go wd.inf.RunWithContext(ictx)
	return wd
}

// sameOrders reports whether an update left the orders as they were: a
// ConfigMap's data (the pause, the settings), a Node's hold (not its
// claim, which this node's own writes change, nor its status).
func sameOrders(a, b any) bool {
	switch a := a.(type) {
	case *corev1.ConfigMap:
		b, ok := b.(*corev1.ConfigMap)
		return ok && maps.Equal(a.Data, b.Data)
	case metav1.Object:
		b, ok := b.(metav1.Object)
		if !ok {
			return false
		}
		ha, heldA := HoldOf(a)
		hb, heldB := HoldOf(b)
		return heldA == heldB && ha.Reason == hb.Reason && ha.By == hb.By && ha.Since.Equal(hb.Since)
	}
	return false
}

// live reports whether the cache can be read: filled, a watch open (one
// that ended leaves the cache behind until the informer lists again),
// not failing, not refused.
func (wd *watched) live() bool {
	if wd == nil || !wd.inf.HasSynced() {
		return false
	}
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.failing && wd.inf.LastSyncResourceVersion() != wd.brokenAt {
		wd.failing = false // a List has succeeded since
	}
	return !wd.failing && !wd.refused && wd.streams.Open()
}

// one is the object the cache holds (nil if there is none), and whether
// the cache can be read.
func (wd *watched) one() (any, bool) {
	if !wd.live() {
		return nil, false
	}
	items := wd.inf.GetStore().List()
	if len(items) == 0 {
		return nil, true
	}
	return items[0], true
}

// configMap is the cluster's ConfigMap as watched (nil if there is none),
// and whether the watch can be read.
func (w *Watch) configMap() (*corev1.ConfigMap, bool) {
	if w == nil {
		return nil, false
	}
	obj, ok := w.cm.one()
	if !ok {
		return nil, false
	}
	cm, _ := obj.(*corev1.ConfigMap)
	return cm, true
}

// nodeMeta is this node's metadata as watched, and whether the watch can
// be read (a Node that is not there cannot: its hold is read, and the
// read says what is wrong).
func (w *Watch) nodeMeta() (metav1.Object, bool) {
	if w == nil {
		return nil, false
	}
	obj, ok := w.node.one()
	m, isMeta := obj.(metav1.Object)
	if !ok || !isMeta {
		return nil, false
	}
	return m, true
}

// OwnNode is this node's metadata as the live watch has it, and whether
// the watch is live (lock.Options.OwnWatched).
func (w *Watch) OwnNode() (metav1.Object, bool) { return w.nodeMeta() }

func (w *Watch) configMapListWatch() *cache.ListWatch {
	cms := w.Client.CoreV1().ConfigMaps(Namespace)
	return kube.Narrowed(kube.ByName(Name), func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return cms.List(ctx, o)
	}, cms.Watch)
}

// Filled waits until both caches have filled, or the API server refused
// a watch, or at most d, and reports whether the looks are answered from
// the watch. A daemon that waits for it before it tells systemd it is
// ready makes its first look from the cache, and no request of its
// start-up is still on its way once it is ready.
func (w *Watch) Filled(ctx context.Context, d time.Duration) bool {
	if w == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(filledPoll)
	defer tick.Stop()
	for !w.cm.settled() || !w.node.settled() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return w.Live()
}

// filledPoll is how often Filled looks at the caches.
const filledPoll = 20 * time.Millisecond

// settled reports whether the cache can be read or the watch was refused.
func (wd *watched) settled() bool {
	if wd == nil {
		return true
	}
	wd.mu.Lock()
	refused := wd.refused
	wd.mu.Unlock()
	return refused || wd.live()
}

// Live reports whether the looks are answered from the watch (both caches
// filled and not failing), at no request each.
func (w *Watch) Live() bool {
	return w != nil && w.cm.live() && w.node.live()
}
