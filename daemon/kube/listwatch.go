package kube

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

// ByName narrows a list or watch to the one object called name: RBAC
// lets a grant limited to resourceNames list and watch with this field
// selector.
func ByName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }
}

// ByLabels narrows a list or watch to the objects selector selects.
func ByLabels(selector string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) { o.LabelSelector = selector }
}

// Narrowed is the ListWatch of an informer whose every List and watch
// narrow narrows.
func Narrowed(narrow func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			narrow(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			narrow(&o)
			return watchFn(ctx, o)
		},
	}
}

// NodeListWatch lists and watches the Nodes narrow selects, and the
// object their informer holds: their metadata when md is set, else whole
// Nodes.
func NodeListWatch(c kubernetes.Interface, md metadata.Interface, narrow func(*metav1.ListOptions)) (*cache.ListWatch, runtime.Object) {
	if md != nil {
		nodes := md.Resource(corev1.SchemeGroupVersion.WithResource("nodes"))
		return Narrowed(narrow, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, o)
		}, nodes.Watch), &metav1.PartialObjectMetadata{}
	}
	nodes := c.CoreV1().Nodes()
	return Narrowed(narrow, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return nodes.List(ctx, o)
	}, nodes.Watch), &corev1.Node{}
}

// Streams counts the watch streams of an informer that are open. A
// reflector whose watch ended (the server's timeout, a resourceVersion
// compacted away: 410) lists and watches again after its back-off, which
// after an outage is up to half a minute, and it reports no error for a
// watch that ended: meanwhile its cache is silently behind. Counted, not
// a flag: an ended stream may be reported after its successor opened.
type Streams struct {
	// Ended, when set, is called after a stream stops, outside the
	// count's lock: a reader that trusts the cache while a stream is
	// open must look again when none is. Set it before Track.
	Ended func()

	mu   sync.Mutex
	open int
}

// Open reports whether a watch stream is open.
func (s *Streams) Open() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open > 0
}

func (s *Streams) add(d int) {
	s.mu.Lock()
	s.open += d
	s.mu.Unlock()
}

// Track makes lw's watches count in s from when a watch starts until it
// is stopped. The reflector stops every watch whose stream it stops
// reading, a stream the server ended included, before it waits out its
// back-off; a watch-list's stream it keeps reading stays open.
func (s *Streams) Track(lw *cache.ListWatch) {
	inner := lw.WatchFuncWithContext
	lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		w, err := inner(ctx, o)
		if err != nil {
			return nil, err
		}
		s.add(1)
		return &tracked{Interface: w, end: func() {
			s.add(-1)
			if s.Ended != nil {
				s.Ended()
			}
		}}, nil
	}
}

// tracked is a watch that calls end once, when it is first stopped.
type tracked struct {
	watch.Interface
	end  func()
	once sync.Once
}

func (t *tracked) Stop() {
	t.once.Do(t.end)
	t.Interface.Stop()
}
