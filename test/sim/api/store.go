// Package api is an in-memory Kubernetes API for the simulator, with the
// semantics kured-host's lock and cycle rely on: one resourceVersion for
// every write, preconditions on it (409 Conflict), UIDs (a Node deleted
// and created again gets a new one), consistent and cached Lists, watches
// in resourceVersion order with initial events, bookmarks, lag and 410
// Gone, and the Node authorizer's rule that a node writes only its own
// Node and evicts only its own pods. It is served to the product's code as
// client-go's kubernetes.Interface and metadata.Interface, each client with
// an identity, and it records every revision of every Node for the
// checkers.
//
// Nothing in it blocks on a mutex while waiting for time to pass, so that
// it runs inside a testing/synctest bubble.
package api

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Admin is the identity of the cluster's administrators (and of the
// simulator's own bookkeeping).
const Admin = "admin"

// NodeIdentity is the user of a node's credentials.
func NodeIdentity(node string) string { return "system:node:" + node }

// Revision is a Node as one write left it.
type Revision struct {
	RV      uint64
	At      time.Time
	By      string // the identity that wrote it
	Node    *corev1.Node
	Deleted bool
	// prev is the index in the store's revisions of the Node's revision
	// before this one (-1: none), so that nodesAt goes back from now.
	prev int
}

// Store holds the objects.
type Store struct {
	mu   sync.Mutex
	rv   uint64
	uids uint64

	nodes map[string]*corev1.Node
	pods  map[string]*corev1.Pod // namespace/name
	// configMaps are namespace/name; a node may read only the one
	// kured-host's RBAC manifest names.
	configMaps map[string]*corev1.ConfigMap
	// events counts the Events created, by reason.
	events map[string]int

	// revisions is every Node revision, in order (for the checkers and
	// for Lists served from the lagging cache).
	revisions []Revision
	lastRev   map[string]int // node name -> index of its latest revision
	names     []string       // the nodes' names, sorted; nil when to be made again
	// byLabel indexes the nodes by label: key -> value -> names, so that
	// a List or a watch by the claim labels does not go through every
	// node of a large cluster.
	byLabel map[string]map[string]map[string]struct{}
	// byNumber is, per label, its values that are numbers, in order, so
	// that a range selector (a place in the queue: gt, lt) finds the
	// values it accepts without trying every one; made when a range
	// asks, dropped when a value of the label comes or goes.
	byNumber map[string][]numbered
	// log is every watchable change, in order, for watches that resume
	// from a resourceVersion; entries older than window are dropped, and
	// a watch from before them gets 410 Gone.
	log      []change
	window   int
	watchers map[*watcher]struct{}

	// Faults decides, per request, what goes wrong.
	Faults Faults
	// Meter, if set (before anything runs), counts the requests and the
	// bytes served.
	Meter *Meter
	// OnNode is called (outside the lock's critical section is not
	// guaranteed: keep it short, never call the Store) after each Node
	// write with the new revision.
	OnNode func(Revision)
	// OnEvict is called after a pod is evicted (deleted by an eviction).
	OnEvict func(pod *corev1.Pod)
	// Denied records every request the authorizer refused.
	denied []string
}

// change is one write, as watchers see it.
type change struct {
	rv       uint64
	resource string
	old, new any // *corev1.Node, *corev1.Pod or *corev1.ConfigMap; nil when absent
}

// name is the changed object's name.
func (c change) name() string {
	for _, o := range []any{c.new, c.old} {
		if m, ok := o.(metav1.Object); ok {
			return m.GetName()
		}
	}
	return ""
}

// NewStore is an empty cluster.
func NewStore() *Store {
	return &Store{
		nodes: map[string]*corev1.Node{}, lastRev: map[string]int{}, pods: map[string]*corev1.Pod{}, events: map[string]int{},
		configMaps: map[string]*corev1.ConfigMap{},
		window:     2000, watchers: map[*watcher]struct{}{},
	}
}

var (
	nodesResource = schema.GroupResource{Resource: "nodes"}
	podsResource  = schema.GroupResource{Resource: "pods"}
	cmResource    = schema.GroupResource{Resource: "configmaps"}
)

// ReadableConfigMap is the one ConfigMap a node may read (kured-host's
// RBAC manifest: the cluster's pause and settings).
const ReadableConfigMap = "kube-system/kured-host"

// SetConfigMap is an admin's write of a ConfigMap's data; nil deletes it.
func (s *Store) SetConfigMap(namespace, name string, data map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cm *corev1.ConfigMap
	if data != nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: maps.Clone(data)}
	}
	put(s, s.configMaps, "configmaps", namespace+"/"+name, cm)
}

// put stores obj in objs under key (nil deletes it) at the next
// revision and tells the watchers of resource. s.mu is held.
func put[T interface {
	comparable
	SetResourceVersion(string)
}](s *Store, objs map[string]T, resource, key string, obj T) {
	var none T
	old, had := objs[key]
	if !had && obj == none {
		return
	}
	rv := s.next()
	var o, nw any
	if had {
		o = old
	}
	if obj == none {
		delete(objs, key)
	} else {
		obj.SetResourceVersion(strconv.FormatUint(rv, 10))
		objs[key] = obj
		nw = obj
	}
	s.publish(change{rv: rv, resource: resource, old: o, new: nw})
}

// EditConfigMap is an admin's patch of a ConfigMap's data, created if
// there is none: change sees the data, and what it leaves is written.
func (s *Store) EditConfigMap(namespace, name string, change func(map[string]string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	data := map[string]string{}
	if cm, ok := s.configMaps[key]; ok {
		data = maps.Clone(cm.Data)
	}
	change(data)
	put(s, s.configMaps, "configmaps", key, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: data})
}

// ConfigMapData is a ConfigMap's data, nil if there is none.
func (s *Store) ConfigMapData(namespace, name string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cm, ok := s.configMaps[namespace+"/"+name]; ok {
		return maps.Clone(cm.Data)
	}
	return nil
}

// listConfigMaps lists the ConfigMaps of namespace o selects. A node may
// list only the one it may read, by name, as RBAC's resourceNames allow.
func (s *Store) listConfigMaps(who, namespace string, o metav1.ListOptions) (*corev1.ConfigMapList, error) {
	match, err := selector(o)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.authorizeConfigMapRead(who, namespace, o.FieldSelector, "list"); err != nil {
		return nil, err
	}
	list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(s.rv, 10)}}
	for _, obj := range s.current("configmaps") {
		if cm := obj.(*corev1.ConfigMap); cm.Namespace == namespace && match(cm) {
			list.Items = append(list.Items, *cm.DeepCopy())
		}
	}
	return list, nil
}

// authorizeConfigMapRead: a node may list or watch ConfigMaps only with a
// field selector naming the one it may read. s.mu is held.
func (s *Store) authorizeConfigMapRead(who, namespace, fieldSelector, verb string) error {
	if who == Admin {
		return nil
	}
	fs, err := fields.ParseSelector(fieldSelector)
	name, named := "", false
	if err == nil {
		name, named = fs.RequiresExactMatch("metadata.name")
	}
	if !named || namespace+"/"+name != ReadableConfigMap {
		return s.deny(who, verb+" configmaps in "+namespace+" ("+fieldSelector+")")
	}
	return nil
}

func (s *Store) getConfigMap(who, namespace, name string) (*corev1.ConfigMap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	if who != Admin && key != ReadableConfigMap {
		return nil, s.deny(who, "get configmap "+key)
	}
	cm, ok := s.configMaps[key]
	if !ok {
		return nil, apierrors.NewNotFound(cmResource, name)
	}
	return cm.DeepCopy(), nil
}

// RV is the newest resourceVersion.
func (s *Store) RV() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rv
}

// Revisions returns every Node revision so far.
func (s *Store) Revisions() []Revision {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.revisions)
}

// Denied lists the refused requests (who, what).
func (s *Store) Denied() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.denied)
}

// Events returns how many Events of each reason were created.
func (s *Store) Events() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.events)
}

// Node returns a copy of a Node, or nil.
func (s *Store) Node(name string) *corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.nodes[name]; ok {
		return n.DeepCopy()
	}
	return nil
}

// Nodes are the Nodes as stored, in name order, not copied: never change
// them. A write stores a new Node, so each stays as it was read; for a
// checker that reads the whole cluster every second.
func (s *Store) Nodes() []*corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*corev1.Node, 0, len(s.nodes))
	for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
		out = append(out, s.nodes[name])
	}
	return out
}

// NodeNames lists the Nodes.
func (s *Store) NodeNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.nodes))
}

// Pods returns copies of the pods for which keep is true.
func (s *Store) Pods(keep func(*corev1.Pod) bool) []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*corev1.Pod
	for _, k := range slices.Sorted(maps.Keys(s.pods)) {
		if p := s.pods[k]; keep == nil || keep(p) {
			out = append(out, p.DeepCopy())
		}
	}
	return out
}

func (s *Store) next() uint64 {
	s.rv++
	return s.rv
}

func (s *Store) uid() types.UID {
	s.uids++
	return types.UID(fmt.Sprintf("uid-%d", s.uids))
}

func rvOf(m metav1.Object) uint64 {
	v, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return v
}

// putNode stores n (nil deletes name) as a new revision by who, and tells
// the watchers. s.mu is held.
func (s *Store) putNode(name string, n *corev1.Node, who string) *corev1.Node {
	old := s.nodes[name]
	rv := s.next()
	rev := Revision{RV: rv, At: time.Now(), By: who, prev: -1}
	if i, ok := s.lastRev[name]; ok {
		rev.prev = i
	}
	s.lastRev[name] = len(s.revisions)
	if n == nil {
		delete(s.nodes, name)
		s.names = nil
		s.index(name, old.Labels, nil)
		gone := old.DeepCopy()
		gone.ResourceVersion = strconv.FormatUint(rv, 10)
		rev.Node, rev.Deleted = gone, true
	} else {
		n.ResourceVersion = strconv.FormatUint(rv, 10)
		if old == nil {
			s.names = nil
			s.index(name, nil, n.Labels)
		} else {
			s.index(name, old.Labels, n.Labels)
		}
		s.nodes[name] = n
		rev.Node = n.DeepCopy()
	}
	s.revisions = append(s.revisions, rev)
	var o, nw any
	if old != nil {
		o = old
	}
	if n != nil {
		nw = n
	}
	s.publish(change{rv: rv, resource: "nodes", old: o, new: nw})
	if s.OnNode != nil {
		s.OnNode(rev)
	}
	if f := s.Faults.Interpose; f != nil && n != nil && who == NodeIdentity(name) {
		if edit := f(rev); edit != nil {
			e := n.DeepCopy()
			edit(e)
			s.putNode(name, e, Admin)
		}
	}
	return n
}

// CreateNode registers a Node as its kubelet does (as the node itself).
func (s *Store) CreateNode(n *corev1.Node) (*corev1.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[n.Name]; ok {
		return nil, apierrors.NewAlreadyExists(nodesResource, n.Name)
	}
	n = n.DeepCopy()
	n.UID = s.uid()
	n.CreationTimestamp = metav1.NewTime(time.Now())
	return s.putNode(n.Name, n, NodeIdentity(n.Name)).DeepCopy(), nil
}

// UpdateNode changes a Node in place as who (the kubelet's status, an
// admin's edit), whatever its resourceVersion.
func (s *Store) UpdateNode(name, who string, change func(*corev1.Node)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return apierrors.NewNotFound(nodesResource, name)
	}
	n = n.DeepCopy()
	change(n)
	s.putNode(name, n, who)
	return nil
}

// DeleteNode deletes a Node (an admin).
func (s *Store) DeleteNode(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[name]; !ok {
		return apierrors.NewNotFound(nodesResource, name)
	}
	s.putNode(name, nil, Admin)
	return nil
}

// CreatePod adds a pod (a controller's).
func (s *Store) CreatePod(p *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p = p.DeepCopy()
	p.UID = s.uid()
	p.CreationTimestamp = metav1.NewTime(time.Now())
	put(s, s.pods, "pods", p.Namespace+"/"+p.Name, p)
}

// UpdatePod changes a pod in place (its kubelet, its controller).
func (s *Store) UpdatePod(namespace, name string, change func(*corev1.Pod)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	p, ok := s.pods[key]
	if !ok {
		return false
	}
	p = p.DeepCopy()
	change(p)
	put(s, s.pods, "pods", key, p)
	return true
}

// DeletePod removes a pod.
func (s *Store) DeletePod(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	put(s, s.pods, "pods", namespace+"/"+name, nil)
}

// nodesAt is the Nodes as they were at rv (for Lists from the cache).
// s.mu is held.
func (s *Store) nodesAt(rv uint64, ls labels.Selector) []*corev1.Node {
	// Back from now: the revisions read are recent ones (a List's, a
	// lagging cache's), and going forward from the first cost a pass over
	// the whole history per read, most of a 1,000-node roll's time. The
	// Nodes written since rv are taken as they were then; the others are
	// as they are now, so the label index finds those that may match (a
	// copy of every Node per read was most of a 5,000-node roll's time).
	then := map[string]*corev1.Node{} // nil: absent at rv
	for i := len(s.revisions) - 1; i >= 0 && s.revisions[i].RV > rv; i-- {
		r := s.revisions[i]
		if r.prev < 0 || s.revisions[r.prev].Deleted {
			then[r.Node.Name] = nil
			continue
		}
		then[r.Node.Name] = s.revisions[r.prev].Node
	}
	var out []*corev1.Node
	for _, obj := range s.candidates(ls) {
		if n := obj.(*corev1.Node); !hasKey(then, n.Name) {
			out = append(out, n)
		}
	}
	for _, n := range then {
		if n != nil {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// cacheRV is the newest revision the watch cache has, lag behind.
// s.mu is held.
func (s *Store) cacheRV(lag time.Duration) uint64 {
	if lag <= 0 {
		return s.rv
	}
	cut := time.Now().Add(-lag)
	// The revisions are in time order: the first one after cut.
	i, _ := slices.BinarySearchFunc(s.revisions, cut, func(r Revision, t time.Time) int {
		if r.At.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return 0
	}
	return s.revisions[i-1].RV
}

func (s *Store) deny(who, what string) error {
	s.denied = append(s.denied, who+": "+what)
	return apierrors.NewForbidden(nodesResource, "", fmt.Errorf("%s may not %s", who, what))
}

// authorizeNodeWrite is the Node authorizer with NodeRestriction: a node
// may write only its own Node. s.mu is held.
func (s *Store) authorizeNodeWrite(who, name, verb string) error {
	if who == Admin || who == NodeIdentity(name) {
		return nil
	}
	return s.deny(who, verb+" node "+name)
}

// index moves node name in byLabel from its labels was to is. s.mu is
// held.
func (s *Store) index(name string, was, is map[string]string) {
	if s.byLabel == nil {
		s.byLabel = map[string]map[string]map[string]struct{}{}
	}
	for k, v := range was {
		if nv, ok := is[k]; ok && nv == v {
			continue
		}
		delete(s.byLabel[k][v], name)
		if len(s.byLabel[k][v]) == 0 {
			delete(s.byLabel[k], v)
			delete(s.byNumber, k)
		}
	}
	for k, v := range is {
		if ov, ok := was[k]; ok && ov == v {
			continue
		}
		if s.byLabel[k] == nil {
			s.byLabel[k] = map[string]map[string]struct{}{}
		}
		if s.byLabel[k][v] == nil {
			s.byLabel[k][v] = map[string]struct{}{}
			delete(s.byNumber, k)
		}
		s.byLabel[k][v][name] = struct{}{}
	}
}

// numbered is a label's value that is a number.
type numbered struct {
	n int64
	v string
}

// inRange is the values of label k that a range from its requirements
// reqs (gt, lt; none other) accepts: those greater than every gt and
// less than every lt, as labels.Requirement reads them (base 10, 64
// bits; a value that is not a number matches no range). s.mu is held.
func (s *Store) inRange(k string, reqs []labels.Requirement) []string {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	for _, r := range reqs {
		if r.Key() != k {
			continue
		}
		b, err := strconv.ParseInt(r.Values().List()[0], 10, 64)
		if err != nil {
			return nil // labels.Parse refuses such a selector
		}
		if r.Operator() == selection.GreaterThan {
			lo = max(lo, b)
		} else {
			hi = min(hi, b)
		}
	}
	if s.byNumber == nil {
		s.byNumber = map[string][]numbered{}
	}
	vals, ok := s.byNumber[k]
	if !ok {
		for v := range s.byLabel[k] {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				vals = append(vals, numbered{n, v})
			}
		}
		slices.SortFunc(vals, func(a, b numbered) int { return cmp.Compare(a.n, b.n) })
		s.byNumber[k] = vals
	}
	from, _ := slices.BinarySearchFunc(vals, lo, func(e numbered, t int64) int {
		if e.n <= t {
			return -1
		}
		return 1
	})
	var out []string
	for _, e := range vals[from:] {
		if e.n >= hi {
			break
		}
		out = append(out, e.v)
	}
	return out
}

// candidates are the current Nodes that may match ls, sorted by name:
// those with a value of a label ls requires that its requirements on that
// label accept (the fewest such, of every label it requires), or every
// Node. The caller still matches each. s.mu is held.
func (s *Store) candidates(ls labels.Selector) []any {
	reqs, _ := ls.Requirements()
	// The name sets of the accepted values of the best label so far
	// (the values of one label are disjoint), and how many names. Counted
	// before any is copied: a label with a value per Node (a place in the
	// queue) made a set of thousands per read of a 5,000-node roll.
	var best []map[string]struct{}
	bestN := -1
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Exists, selection.Equals, selection.DoubleEquals, selection.In, selection.GreaterThan, selection.LessThan:
		default:
			continue // matches nodes without the label too
		}
		k := r.Key()
		var sets []map[string]struct{}
		n := 0
		if ranged(k, reqs) {
			for _, v := range s.inRange(k, reqs) {
				names := s.byLabel[k][v]
				sets, n = append(sets, names), n+len(names)
			}
		} else {
			one := labels.Set{k: ""}
			for v, names := range s.byLabel[k] {
				one[k] = v
				ok := true
				for _, q := range reqs {
					if q.Key() == k && !q.Matches(one) {
						ok = false
						break
					}
				}
				if ok {
					sets, n = append(sets, names), n+len(names)
				}
			}
		}
		if bestN < 0 || n < bestN {
			best, bestN = sets, n
		}
	}
	if bestN < 0 {
		return s.current("nodes")
	}
	// A requirement that a label not have a value leaves out the Nodes
	// that have it, before the sort: far back, a node reads the waiting
	// claims whose limits are not its own, one of thousands waiting.
	var without []map[string]struct{}
	for _, r := range reqs {
		if op := r.Operator(); op == selection.NotEquals || op == selection.NotIn {
			for v := range r.Values() {
				if set := s.byLabel[r.Key()][v]; len(set) > 0 {
					without = append(without, set)
				}
			}
		}
	}
	names := make([]string, 0, bestN)
	for _, set := range best {
	name:
		for n := range set {
			for _, w := range without {
				if _, ok := w[n]; ok {
					continue name
				}
			}
			names = append(names, n)
		}
	}
	slices.Sort(names)
	out := make([]any, len(names))
	for i, n := range names {
		out[i] = s.nodes[n]
	}
	return out
}

// ranged reports whether every requirement of reqs on label k is a
// range (gt, lt): then inRange finds its values.
func ranged(k string, reqs []labels.Requirement) bool {
	for _, r := range reqs {
		if r.Key() != k {
			continue
		}
		if op := r.Operator(); op != selection.GreaterThan && op != selection.LessThan {
			return false
		}
	}
	return true
}
