package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Request is one request, as the faults see it.
type Request struct {
	Who, Verb, Resource, Subresource, Namespace, Name string
	// Selector is a List's or a watch's label selector: a scenario
	// tells one read of the queue from another by it.
	Selector string
}

// Write reports whether the request changes something.
func (r Request) Write() bool {
	switch r.Verb {
	case "get", "list", "watch":
		return false
	}
	return true
}

// Faults decide what goes wrong with a request. Each may be nil.
type Faults struct {
	// Before may fail a request before it is served (an outage, a
	// refused connection): nothing is applied.
	Before func(Request) error
	// LoseReply, after a write was applied, makes the caller get a
	// time-out instead of the reply.
	LoseReply func(Request) bool
	// WatchLag delays every event of a new watch.
	WatchLag func(Request) time.Duration
	// CacheLag is how far behind the API server's cache is for Lists with
	// resourceVersion "0".
	CacheLag func(Request) time.Duration
	// Evict decides an eviction: nil allows it, an error refuses it (a
	// PodDisruptionBudget: apierrors.NewTooManyRequests).
	Evict func(pod *corev1.Pod) error
	// Interpose, after a node's write to its own Node, may return an
	// admin's edit to apply at once, before anything else is served: a
	// hand in the narrowest windows (between an announce and its verify,
	// between a claim's record and the cordon it records).
	Interpose func(Revision) func(*corev1.Node)
}

// ErrLostReply is what a caller gets when a write's reply is lost.
var ErrLostReply = errors.New("the request timed out (the write may have been applied)")

// ErrSevered is what a killed process's client gets.
var ErrSevered = errors.New("connection refused (the process is gone)")

// Client is one process's connection to the API, with one identity.
type Client struct {
	s       *Store
	who     string
	Kube    *fake.Clientset
	Meta    metadata.Interface
	severed atomic.Bool
}

// Client returns a new connection for who (NodeIdentity(node) or Admin).
func (s *Store) Client(who string) *Client {
	c := &Client{s: s, who: who}
	// NewClientset for its discovery client; its object tracker is not
	// used: every request goes to the store.
	c.Kube = fake.NewClientset()
	c.Kube.ReactionChain, c.Kube.WatchReactionChain = nil, nil
	c.Kube.AddReactor("*", "*", c.react)
	c.Kube.AddWatchReactor("*", c.reactWatch)
	// The eviction subresource, as the drain helper looks it up.
	c.Kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: "v1",
		APIResources: []metav1.APIResource{{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"}},
	}}
	c.Meta = metaClient{c}
	return c
}

// Sever ends the connection: every request from now on fails, and its
// watches end (the process was killed).
func (c *Client) Sever() {
	c.severed.Store(true)
	c.s.EndWatches(c.who + "#" + c.id())
}

// id tells this client's watches apart from those of another process
// with the same identity.
func (c *Client) id() string { return fmt.Sprintf("%p", c) }

// Forget drops the requests the fake clientset has recorded, which it
// keeps forever.
func (c *Client) Forget() { c.Kube.ClearActions() }

func (c *Client) before(r Request) error {
	if c.severed.Load() {
		return ErrSevered
	}
	if f := c.s.Faults.Before; f != nil {
		return f(r)
	}
	return nil
}

func (c *Client) lose(r Request) bool {
	f := c.s.Faults.LoseReply
	return f != nil && f(r)
}

func request(who string, a k8stesting.Action) Request {
	r := Request{Who: who, Verb: a.GetVerb(), Resource: a.GetResource().Resource, Subresource: a.GetSubresource(), Namespace: a.GetNamespace()}
	// Get, patch and delete actions all name their object.
	if named, ok := a.(interface{ GetName() string }); ok {
		r.Name = named.GetName()
	}
	switch a := a.(type) {
	case k8stesting.ListActionImpl:
		r.Selector = a.ListOptions.LabelSelector
	case k8stesting.WatchActionImpl:
		if a.WatchRestrictions.Labels != nil {
			r.Selector = a.WatchRestrictions.Labels.String()
		}
	}
	return r
}

func (c *Client) react(a k8stesting.Action) (bool, runtime.Object, error) {
	r := request(c.who, a)
	if r.Resource == "resource" {
		return true, nil, c.before(r) // discovery
	}
	if err := c.before(r); err != nil {
		return true, nil, err
	}
	obj, err := c.serve(r, a)
	var o *metav1.ListOptions
	if l, ok := a.(k8stesting.ListActionImpl); ok {
		o = &l.ListOptions
	} else if w, ok := a.(k8stesting.WatchActionImpl); ok {
		o = &metav1.ListOptions{}
		if w.WatchRestrictions.Labels != nil {
			o.LabelSelector = w.WatchRestrictions.Labels.String()
		}
		if w.WatchRestrictions.Fields != nil {
			o.FieldSelector = w.WatchRestrictions.Fields.String()
		}
	}
	c.s.Meter.request(c.who, kindOf(r, o), obj)
	if err == nil && r.Write() && c.lose(r) {
		return true, nil, ErrLostReply
	}
	return true, obj, err
}

func (c *Client) serve(r Request, a k8stesting.Action) (runtime.Object, error) {
	s := c.s
	switch {
	case r.Resource == "nodes" && r.Verb == "get":
		if n := s.Node(r.Name); n != nil {
			return n, nil
		}
		return nil, apierrors.NewNotFound(nodesResource, r.Name)
	case r.Resource == "nodes" && r.Verb == "list":
		return s.listNodes(r, a.(k8stesting.ListActionImpl).ListOptions)
	case r.Resource == "nodes" && r.Verb == "patch":
		p := a.(k8stesting.PatchAction)
		return s.patchNode(c.who, r.Name, p.GetPatchType(), p.GetPatch())
	case r.Resource == "nodes" && r.Verb == "update":
		return s.updateNode(c.who, a.(k8stesting.UpdateAction).GetObject().(*corev1.Node))
	case r.Resource == "pods" && r.Verb == "list":
		return s.listPods(a.(k8stesting.ListActionImpl).ListOptions)
	case r.Resource == "pods" && r.Verb == "get":
		s.mu.Lock()
		p, ok := s.pods[r.Namespace+"/"+r.Name]
		s.mu.Unlock()
		if !ok {
			return nil, apierrors.NewNotFound(podsResource, r.Name)
		}
		return p.DeepCopy(), nil
	case r.Resource == "pods" && r.Verb == "create" && r.Subresource == "eviction":
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		return ev, s.evict(c.who, ev.Namespace, ev.Name)
	case r.Resource == "configmaps" && r.Verb == "get":
		return s.getConfigMap(c.who, r.Namespace, r.Name)
	case r.Resource == "configmaps" && r.Verb == "list":
		list, err := s.listConfigMaps(c.who, r.Namespace, a.(k8stesting.ListActionImpl).ListOptions)
		if err != nil {
			return nil, err // not a typed nil: the fake client reads it
		}
		return list, nil
	case r.Resource == "events" && r.Verb == "create":
		e := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		s.mu.Lock()
		s.events[e.Reason]++
		s.mu.Unlock()
		return e, nil
	}
	return nil, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: r.Resource}, r.Verb+" "+r.Subresource)
}

func (s *Store) listNodes(r Request, o metav1.ListOptions) (*corev1.NodeList, error) {
	match, err := selector(o)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, err := labels.Parse(o.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	rv := s.rv
	list := &corev1.NodeList{}
	var nodes []*corev1.Node
	total := -1 // the matching nodes when nodes holds only the first of them
	switch {
	case o.Limit > 0 && o.LabelSelector == "" && o.FieldSelector == "" && o.ResourceVersionMatch != metav1.ResourceVersionMatchExact &&
		(o.ResourceVersion != "0" || s.Faults.CacheLag == nil):
		// A first page of every Node (a count of the cluster): cut from
		// the sorted names, not from a copy of them all.
		names := s.sortedNames()
		total = len(names)
		for _, n := range names[:min(int64(len(names)), o.Limit+1)] {
			nodes = append(nodes, s.nodes[n])
		}
	case o.ResourceVersionMatch == metav1.ResourceVersionMatchExact:
		// At that revision exactly, as etcd serves it.
		at, err := strconv.ParseUint(o.ResourceVersion, 10, 64)
		if err != nil || at > s.rv {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: not a revision the store has", o.ResourceVersion))
		}
		rv = at
		nodes = firstMatches(s.nodesAt(rv, ls), match, o)
	case o.ResourceVersion == "0" && s.Faults.CacheLag != nil:
		rv = s.cacheRV(s.Faults.CacheLag(r))
		nodes = firstMatches(s.nodesAt(rv, ls), match, o)
	default:
		nodes = firstMatches(s.candidates(ls), match, o)
	}
	list.ResourceVersion = strconv.FormatUint(rv, 10)
	// A first page, as the API server serves it: with no selector, it
	// says how many remain (no request here reads a next page). Cut
	// before the copies: a limited read far back matches thousands.
	if o.Limit > 0 && int64(len(nodes)) > o.Limit {
		if o.LabelSelector == "" && o.FieldSelector == "" {
			list.RemainingItemCount = ptr.To(int64(max(total, len(nodes))) - o.Limit)
		}
		nodes, list.Continue = nodes[:o.Limit], "next"
	}
	list.Items = make([]corev1.Node, len(nodes))
	for i, n := range nodes {
		n.DeepCopyInto(&list.Items[i])
	}
	return list, nil
}

// firstMatches is the nodes (sorted by name) that match, all of them
// or, for a page with a selector, one more than the page (which then
// says that more remain; with a selector it does not say how many): a
// node far back reads a page of the thousands ahead of it.
func firstMatches[T any](nodes []T, match func(any) bool, o metav1.ListOptions) []*corev1.Node {
	paged := o.Limit > 0 && (o.LabelSelector != "" || o.FieldSelector != "")
	var out []*corev1.Node
	for _, n := range nodes {
		if match(n) {
			if out = append(out, any(n).(*corev1.Node)); paged && int64(len(out)) > o.Limit {
				break
			}
		}
	}
	return out
}

func (s *Store) listPods(o metav1.ListOptions) (*corev1.PodList, error) {
	match, err := selector(o)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(s.rv, 10)}}
	for _, obj := range s.current("pods") {
		if match(obj) {
			list.Items = append(list.Items, *obj.(*corev1.Pod).DeepCopy())
		}
	}
	return list, nil
}

// patchNode applies a merge, strategic or JSON patch. A resourceVersion
// or UID in the patched object is a precondition, as on the API server.
func (s *Store) patchNode(who, name string, pt types.PatchType, patch []byte) (*corev1.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.authorizeNodeWrite(who, name, "patch"); err != nil {
		return nil, err
	}
	cur, ok := s.nodes[name]
	if !ok {
		return nil, apierrors.NewNotFound(nodesResource, name)
	}
	orig, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	var out []byte
	switch pt {
	case types.MergePatchType:
		out, err = jsonpatch.MergePatch(orig, patch)
	case types.StrategicMergePatchType:
		out, err = strategicpatch.StrategicMergePatch(orig, patch, corev1.Node{})
	case types.JSONPatchType:
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(patch); err == nil {
			out, err = p.Apply(orig)
		}
	default:
		return nil, apierrors.NewBadRequest("unsupported patch type " + string(pt))
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	var n corev1.Node
	if err := json.Unmarshal(out, &n); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if (n.ResourceVersion != "" && n.ResourceVersion != cur.ResourceVersion) || (n.UID != "" && n.UID != cur.UID) {
		return nil, apierrors.NewConflict(nodesResource, name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	n.Name, n.UID, n.CreationTimestamp = cur.Name, cur.UID, cur.CreationTimestamp
	return s.putNode(name, &n, who).DeepCopy(), nil
}

func (s *Store) updateNode(who string, n *corev1.Node) (*corev1.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.authorizeNodeWrite(who, n.Name, "update"); err != nil {
		return nil, err
	}
	cur, ok := s.nodes[n.Name]
	if !ok {
		return nil, apierrors.NewNotFound(nodesResource, n.Name)
	}
	if (n.ResourceVersion != "" && n.ResourceVersion != cur.ResourceVersion) || (n.UID != "" && n.UID != cur.UID) {
		return nil, apierrors.NewConflict(nodesResource, n.Name, errors.New("the object has been modified"))
	}
	n = n.DeepCopy()
	n.UID, n.CreationTimestamp = cur.UID, cur.CreationTimestamp
	return s.putNode(n.Name, n, who).DeepCopy(), nil
}

// evict deletes a pod of who's node, unless Faults.Evict refuses.
func (s *Store) evict(who, namespace, name string) error {
	s.mu.Lock()
	p, ok := s.pods[namespace+"/"+name]
	if !ok {
		s.mu.Unlock()
		return apierrors.NewNotFound(podsResource, name)
	}
	if who != Admin && who != NodeIdentity(p.Spec.NodeName) {
		err := s.deny(who, "evict pod "+namespace+"/"+name+" of node "+p.Spec.NodeName)
		s.mu.Unlock()
		return err
	}
	p = p.DeepCopy()
	s.mu.Unlock()
	if f := s.Faults.Evict; f != nil {
		if err := f(p); err != nil {
			return err
		}
	}
	s.DeletePod(namespace, name)
	if s.OnEvict != nil {
		s.OnEvict(p)
	}
	return nil
}

func (c *Client) reactWatch(a k8stesting.Action) (bool, watch.Interface, error) {
	r := request(c.who, a)
	if err := c.before(r); err != nil {
		return true, nil, err
	}
	o := a.(k8stesting.WatchActionImpl).ListOptions
	if r.Resource == "configmaps" {
		c.s.mu.Lock()
		err := c.s.authorizeConfigMapRead(c.who, r.Namespace, o.FieldSelector, "watch")
		c.s.mu.Unlock()
		if err != nil {
			return true, nil, err
		}
	}
	w, err := c.s.startWatch(c.who+"#"+c.id(), kindOf(r, &o), r.Resource, o, typed(r.Resource), c.watchLag(r))
	return true, w, err
}

func (c *Client) watchLag(r Request) time.Duration {
	if f := c.s.Faults.WatchLag; f != nil {
		return f(r)
	}
	return 0
}

// metaClient serves metadata.Interface from the store, with the same
// identity, faults and severing as the typed client.
type metaClient struct{ c *Client }

func (m metaClient) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return metaResource{c: m.c, resource: gvr.Resource}
}

type metaResource struct {
	c         *Client
	resource  string
	namespace string
}

var _ metadata.Getter = metaResource{}

func (m metaResource) Namespace(ns string) metadata.ResourceInterface {
	m.namespace = ns
	return m
}

func (m metaResource) kind() string {
	if m.resource == "pods" {
		return "Pod"
	}
	return "Node"
}

func (m metaResource) req(verb, name string) Request {
	return Request{Who: m.c.who, Verb: verb, Resource: m.resource, Namespace: m.namespace, Name: name}
}

func (m metaResource) Get(ctx context.Context, name string, _ metav1.GetOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	r := m.req("get", name)
	if err := m.c.before(r); err != nil {
		return nil, err
	}
	if m.resource != "nodes" {
		return nil, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: m.resource}, "get")
	}
	n := m.c.s.Node(name)
	if n == nil {
		m.c.s.Meter.request(m.c.who, kindOf(r, nil)+" (metadata)", nil)
		return nil, apierrors.NewNotFound(nodesResource, name)
	}
	out := metadataOnly(m.kind())(n, rvOf(n)).(*metav1.PartialObjectMetadata)
	m.c.s.Meter.request(m.c.who, kindOf(r, nil)+" (metadata)", out)
	return out, nil
}

func (m metaResource) List(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	r := m.req("list", "")
	r.Selector = o.LabelSelector
	if err := m.c.before(r); err != nil {
		return nil, err
	}
	if m.resource != "nodes" {
		return nil, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: m.resource}, "list")
	}
	nodes, err := m.c.s.listNodes(r, o)
	if err != nil {
		return nil, err
	}
	out := &metav1.PartialObjectMetadataList{ListMeta: nodes.ListMeta}
	conv := metadataOnly(m.kind())
	for i := range nodes.Items {
		out.Items = append(out.Items, *conv(&nodes.Items[i], rvOf(&nodes.Items[i])).(*metav1.PartialObjectMetadata))
	}
	m.c.s.Meter.request(m.c.who, kindOf(r, &o)+" (metadata)", out)
	return out, nil
}

func (m metaResource) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	r := m.req("watch", "")
	r.Selector = o.LabelSelector
	if err := m.c.before(r); err != nil {
		return nil, err
	}
	m.c.s.Meter.request(m.c.who, kindOf(r, &o)+" (metadata)", nil)
	return m.c.s.startWatch(m.c.who+"#"+m.c.id(), kindOf(r, &o)+" (metadata)", m.resource, o, metadataOnly(m.kind()), m.c.watchLag(r))
}

func (m metaResource) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	r := m.req("patch", name)
	if err := m.c.before(r); err != nil {
		return nil, err
	}
	n, err := m.c.s.patchNode(m.c.who, name, pt, data)
	if err != nil {
		return nil, err
	}
	if m.c.lose(r) {
		return nil, ErrLostReply
	}
	return metadataOnly(m.kind())(n, rvOf(n)).(*metav1.PartialObjectMetadata), nil
}

func (m metaResource) Delete(context.Context, string, metav1.DeleteOptions, ...string) error {
	return apierrors.NewMethodNotSupported(schema.GroupResource{Resource: m.resource}, "delete")
}

func (m metaResource) DeleteCollection(context.Context, metav1.DeleteOptions, metav1.ListOptions) error {
	return apierrors.NewMethodNotSupported(schema.GroupResource{Resource: m.resource}, "deletecollection")
}
