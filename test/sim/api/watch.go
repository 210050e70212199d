package api

import (
	"cmp"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// initialEventsEnd is the annotation of the bookmark that ends the
// initial events of a watch that asked for them (a watch-list).
const initialEventsEnd = "k8s.io/initial-events-end"

// bookmarkEvery is how often a watch that allows bookmarks gets one.
const bookmarkEvery = time.Minute

// watcher is one watch: the events it matches, queued with the time each
// may be delivered (its lag), and a goroutine that delivers them in order.
type watcher struct {
	s    *Store
	who  string
	kind string // the watch request's kind, for the meter
	// timeout ends the watch, as the API server ends a watch that asked
	// for no timeout after its --min-request-timeout (30 to 60 min);
	// zero: never (informers ask for 5 to 10 min, not simulated).
	timeout  time.Duration
	resource string
	match    func(any) bool
	convert  func(obj any, rv uint64) runtime.Object
	lag      time.Duration
	bookmark bool
	// name is the one object a field selector metadata.name=… allows
	// ("": any): a change of another is not offered to it (a 1,000-node
	// roll has a thousand such watches, one per node far back).
	name string

	out  chan watch.Event
	wake chan struct{}
	done chan struct{}
	stop sync.Once

	mu     sync.Mutex
	queue  []queued
	lastRV uint64 // the newest change this watch has been given
}

type queued struct {
	at time.Time
	ev watch.Event
}

var _ watch.Interface = (*watcher)(nil)

// ResultChan implements watch.Interface.
func (w *watcher) ResultChan() <-chan watch.Event { return w.out }

// Stop implements watch.Interface.
// The store's lock is taken outside stop.Do: end runs under that lock
// and waits on stop.Do, so a Stop holding stop.Do while waiting for the
// lock would deadlock with it (as it did when a roll was cut short
// while daemons stopped their watches).
func (w *watcher) Stop() {
	w.stop.Do(func() { close(w.done) })
	w.s.mu.Lock()
	delete(w.s.watchers, w)
	w.s.mu.Unlock()
}

// end closes the watch from the server's side (the connection dropped).
// s.mu is held.
func (w *watcher) end() {
	w.stop.Do(func() { close(w.done) })
	delete(w.s.watchers, w)
}

func (w *watcher) enqueue(ev watch.Event, rv uint64) {
	w.s.Meter.event(w.who, w.kind, ev.Object)
	w.mu.Lock()
	w.queue = append(w.queue, queued{at: time.Now().Add(w.lag), ev: ev})
	w.lastRV = max(w.lastRV, rv)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// deliver sends the queued events in order, each no earlier than its
// time, and bookmarks now and then; it closes the result channel when the
// watch ends.
func (w *watcher) deliver() {
	defer close(w.out)
	var tick <-chan time.Time
	if w.bookmark {
		t := time.NewTicker(bookmarkEvery)
		defer t.Stop()
		tick = t.C
	}
	if w.timeout > 0 {
		t := time.AfterFunc(w.timeout, func() {
			w.s.mu.Lock()
			w.end()
			w.s.mu.Unlock()
		})
		defer t.Stop()
	}
	for {
		w.mu.Lock()
		var next *queued
		if len(w.queue) > 0 {
			next = &w.queue[0]
		}
		w.mu.Unlock()
		if next == nil {
			select {
			case <-w.done:
				return
			case <-w.wake:
			case <-tick:
				w.sendBookmark()
			}
			continue
		}
		if d := time.Until(next.at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-w.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		select {
		case <-w.done:
			return
		case w.out <- next.ev:
			w.mu.Lock()
			w.queue = w.queue[1:]
			w.mu.Unlock()
		}
	}
}

func (w *watcher) sendBookmark() {
	w.mu.Lock()
	rv := w.lastRV
	w.mu.Unlock()
	select {
	case <-w.done:
	case w.out <- watch.Event{Type: watch.Bookmark, Object: w.convert(nil, rv)}:
	}
}

// publish hands a change to the watches of its resource. s.mu is held.
func (s *Store) publish(c change) {
	s.log = append(s.log, c)
	if len(s.log) > s.window {
		// Resliced, not shifted: append reallocates now and then.
		s.log = s.log[len(s.log)-s.window:]
	}
	for w := range s.watchers {
		if w.resource == c.resource && (w.name == "" || w.name == c.name()) {
			w.offer(c)
		}
	}
}

// offer turns a change into the event this watch sees: an object that
// comes into its selection is added, one that leaves it is deleted.
func (w *watcher) offer(c change) {
	was := c.old != nil && w.match(c.old)
	is := c.new != nil && w.match(c.new)
	switch {
	case is && was:
		w.enqueue(watch.Event{Type: watch.Modified, Object: w.convert(c.new, c.rv)}, c.rv)
	case is:
		w.enqueue(watch.Event{Type: watch.Added, Object: w.convert(c.new, c.rv)}, c.rv)
	case was && c.new != nil:
		w.enqueue(watch.Event{Type: watch.Deleted, Object: w.convert(c.new, c.rv)}, c.rv)
	case was:
		w.enqueue(watch.Event{Type: watch.Deleted, Object: w.convert(c.old, c.rv)}, c.rv)
	}
}

// ExpireHistory forgets the changes so far: a watch that resumes from
// before now gets 410 Gone, as after an etcd compaction.
func (s *Store) ExpireHistory() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

// EndWatches ends every watch of who ("" for everyone's), as an API
// server restart or a dropped connection does.
func (s *Store) EndWatches(who string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		if who == "" || w.who == who {
			w.end()
		}
	}
}

// selector builds the match function of a List or a watch: a label
// selector, and the field selectors the lock and the drain use
// (metadata.name, spec.nodeName).
func selector(o metav1.ListOptions) (func(any) bool, error) {
	ls := labels.Everything()
	if o.LabelSelector != "" {
		var err error
		if ls, err = labels.Parse(o.LabelSelector); err != nil {
			return nil, err
		}
	}
	fs := fields.Everything()
	if o.FieldSelector != "" {
		var err error
		if fs, err = fields.ParseSelector(o.FieldSelector); err != nil {
			return nil, err
		}
	}
	return func(obj any) bool {
		var m metav1.Object
		switch o := obj.(type) {
		case *corev1.Node:
			m = o
		case *corev1.Pod:
			m = o
		case *corev1.ConfigMap:
			m = o
		default:
			return false
		}
		// The labels first, and the fields' set only when asked: a
		// 1,000-node roll's Lists spent a quarter of its time here.
		if !ls.Matches(labels.Set(m.GetLabels())) {
			return false
		}
		if fs.Empty() {
			return true
		}
		set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
		if p, ok := obj.(*corev1.Pod); ok {
			set["spec.nodeName"] = p.Spec.NodeName
		}
		return fs.Matches(set)
	}, nil
}

// typed returns a converter to copies of the typed objects.
func typed(kind string) func(any, uint64) runtime.Object {
	return func(obj any, rv uint64) runtime.Object {
		switch o := obj.(type) {
		case *corev1.Node:
			c := o.DeepCopy()
			c.ResourceVersion = strconv.FormatUint(rv, 10)
			return c
		case *corev1.Pod:
			c := o.DeepCopy()
			c.ResourceVersion = strconv.FormatUint(rv, 10)
			return c
		case *corev1.ConfigMap:
			c := o.DeepCopy()
			c.ResourceVersion = strconv.FormatUint(rv, 10)
			return c
		}
		// A bookmark: an empty object of the kind, at rv.
		switch kind {
		case "pods":
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
		case "configmaps":
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
	}
}

// metadataOnly converts to PartialObjectMetadata, as the metadata client
// reads objects.
func metadataOnly(kind string) func(any, uint64) runtime.Object {
	return func(obj any, rv uint64) runtime.Object {
		p := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind}}
		switch o := obj.(type) {
		case *corev1.Node:
			p.ObjectMeta = *o.ObjectMeta.DeepCopy()
		case *corev1.Pod:
			p.ObjectMeta = *o.ObjectMeta.DeepCopy()
		}
		p.ResourceVersion = strconv.FormatUint(rv, 10)
		return p
	}
}

// startWatch opens a watch on resource for who with the options of the
// request: the current objects first (as synthetic additions, for
// resourceVersion "" or "0", or as the initial events of a watch-list,
// ended by a bookmark), or the changes after a resourceVersion (410 Gone
// when they are no longer kept).
func (s *Store) startWatch(who, kind, resource string, o metav1.ListOptions, convert func(any, uint64) runtime.Object, lag time.Duration) (watch.Interface, error) {
	match, err := selector(o)
	if err != nil {
		return nil, err
	}
	w := &watcher{
		s: s, who: who, kind: kind, resource: resource, match: match, convert: convert, lag: lag,
		bookmark: o.AllowWatchBookmarks,
		out:      make(chan watch.Event), wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if fs, err := fields.ParseSelector(o.FieldSelector); err == nil {
		w.name, _ = fs.RequiresExactMatch("metadata.name")
	}
	if o.TimeoutSeconds == nil {
		// 30 to 60 minutes, the same for the same watch in a run.
		identity, _, _ := strings.Cut(who, "#") // not the process's
		h := fnv.New32a()
		_, _ = h.Write([]byte(identity + kind + o.FieldSelector))
		w.timeout = 30*time.Minute + time.Duration(h.Sum32()%1800)*time.Second
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	initial := o.SendInitialEvents != nil && *o.SendInitialEvents
	from, perr := strconv.ParseUint(o.ResourceVersion, 10, 64)
	switch {
	case initial || o.ResourceVersion == "" || o.ResourceVersion == "0" || perr != nil:
		for _, obj := range s.watched(resource, w.name, o.LabelSelector) {
			if match(obj) {
				w.enqueue(watch.Event{Type: watch.Added, Object: convert(obj, rvOf(obj.(metav1.Object)))}, s.rv)
			}
		}
		w.lastRV = s.rv
		if initial {
			b := convert(nil, s.rv)
			m := b.(metav1.Object)
			m.SetAnnotations(map[string]string{initialEventsEnd: "true"})
			w.enqueue(watch.Event{Type: watch.Bookmark, Object: b}, s.rv)
		}
	case from < s.rv && (len(s.log) == 0 || s.log[0].rv > from+1):
		// Too old: the changes after it are gone.
		w.enqueue(watch.Event{Type: watch.Error, Object: &metav1.Status{
			Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired,
			Message: "too old resource version: " + o.ResourceVersion,
		}}, s.rv)
		go func() {
			// Delivered, then the server closes the watch.
			w.deliverThenEnd()
		}()
		return w, nil
	default:
		w.lastRV = from
		// The log is in revision order: from the first change after
		// from, not through the whole window.
		i, _ := slices.BinarySearchFunc(s.log, from, func(c change, rv uint64) int { return cmp.Compare(c.rv, rv+1) })
		for _, c := range s.log[i:] {
			if c.resource == resource {
				w.offer(c)
			}
		}
	}
	s.watchers[w] = struct{}{}
	go w.deliver()
	return w, nil
}

// deliverThenEnd sends what is queued and closes the watch.
func (w *watcher) deliverThenEnd() {
	defer close(w.out)
	w.mu.Lock()
	q := slices.Clone(w.queue)
	w.mu.Unlock()
	for _, e := range q {
		select {
		case <-w.done:
			return
		case w.out <- e.ev:
		}
	}
}

// watched is what a watch of resource starts from, a superset of what
// it matches: one Node by name, the Nodes the label index offers, or
// every object. s.mu is held.
func (s *Store) watched(resource, name, selector string) []any {
	if resource != "nodes" {
		return s.current(resource)
	}
	if name != "" {
		if n, ok := s.nodes[name]; ok {
			return []any{n}
		}
		return nil
	}
	ls, err := labels.Parse(selector)
	if err != nil {
		return s.current(resource) // the match refuses what this cannot read
	}
	return s.candidates(ls)
}

// current lists the objects of resource. s.mu is held.
func (s *Store) current(resource string) []any {
	var out []any
	switch resource {
	case "nodes":
		for _, k := range s.sortedNames() {
			out = append(out, s.nodes[k])
		}
	case "pods":
		for _, k := range slices.Sorted(maps.Keys(s.pods)) {
			out = append(out, s.pods[k])
		}
	case "configmaps":
		for _, k := range slices.Sorted(maps.Keys(s.configMaps)) {
			out = append(out, s.configMaps[k])
		}
	}
	return out
}

// sortedNames is the nodes' names, sorted. s.mu is held.
func (s *Store) sortedNames() []string {
	if s.names == nil {
		s.names = slices.Sorted(maps.Keys(s.nodes))
	}
	return s.names
}

// Written is how many Node revisions there are and how much virtual time
// lies between the first and the newest, for the cost measurement's
// progress line.
func (s *Store) Written() (revisions int, over time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.revisions) == 0 {
		return 0, 0
	}
	return len(s.revisions), s.revisions[len(s.revisions)-1].At.Sub(s.revisions[0].At)
}

// WatchStats is how many watches are open and how many events wait in
// their queues, for the cost measurement.
func (s *Store) WatchStats() (watches, queued int) {
	s.mu.Lock()
	ws := slices.Collect(maps.Keys(s.watchers))
	s.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		queued += len(w.queue)
		w.mu.Unlock()
	}
	return len(ws), queued
}
