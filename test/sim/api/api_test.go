package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// TestWritesArePreconditioned: a patch that names an old resourceVersion
// is refused with 409; one that names the current one is applied; a node
// may not write another node's Node.
func TestWritesArePreconditioned(t *testing.T) {
	s := NewStore()
	if _, err := s.CreateNode(node("a", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateNode(node("b", nil)); err != nil {
		t.Fatal(err)
	}
	a := s.Client(NodeIdentity("a")).Kube.CoreV1().Nodes()
	ctx := context.Background()
	n, err := a.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := n.ResourceVersion
	patch := func(rv string) error {
		_, err := a.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"`+rv+`","labels":{"x":"y"}}}`), metav1.PatchOptions{})
		return err
	}
	if err := patch(old); err != nil {
		t.Fatalf("patch at the current version: %v", err)
	}
	if err := patch(old); !apierrors.IsConflict(err) {
		t.Errorf("patch at an old version: %v, want a conflict", err)
	}
	if _, err := a.Patch(ctx, "b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a patches b: %v, want forbidden", err)
	}
	if len(s.Denied()) != 1 {
		t.Errorf("denied %q", s.Denied())
	}
	if err := s.DeleteNode("a"); err != nil {
		t.Fatal(err)
	}
	again, _ := s.CreateNode(node("a", nil))
	if again.UID == n.UID {
		t.Error("a Node created again kept its UID")
	}
}

// TestWatch: events in order, an object leaving the selector is deleted,
// a watch from a forgotten version gets 410, a watch-list ends its
// initial events with a bookmark, and lag delays delivery.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore()
		s.Faults.WatchLag = func(Request) time.Duration { return 3 * time.Second }
		c := s.Client(Admin)
		ctx := context.Background()
		_, _ = s.CreateNode(node("a", map[string]string{"claim": "waiting"}))
		_, _ = s.CreateNode(node("b", nil))
		yes := true
		w, err := c.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "claim", SendInitialEvents: &yes, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		start := time.Now()
		next := func() watch.Event {
			t.Helper()
			select {
			case ev := <-w.ResultChan():
				return ev
			case <-time.After(time.Hour):
				t.Fatal("no event")
			}
			return watch.Event{}
		}
		if ev := next(); ev.Type != watch.Added || ev.Object.(*corev1.Node).Name != "a" {
			t.Errorf("first event %v", ev)
		}
		if lag := time.Since(start); lag != 3*time.Second {
			t.Errorf("delivered after %s, want the 3s lag", lag)
		}
		if ev := next(); ev.Type != watch.Bookmark || ev.Object.(*corev1.Node).Annotations[initialEventsEnd] != "true" {
			t.Errorf("second event %v, want the end of the initial events", ev)
		}
		_ = s.UpdateNode("b", Admin, func(n *corev1.Node) { n.Labels = map[string]string{"claim": "waiting"} })
		_ = s.UpdateNode("a", Admin, func(n *corev1.Node) { n.Labels = nil })
		if ev := next(); ev.Type != watch.Added || ev.Object.(*corev1.Node).Name != "b" {
			t.Errorf("b labelled: %v", ev)
		}
		if ev := next(); ev.Type != watch.Deleted || ev.Object.(*corev1.Node).Name != "a" {
			t.Errorf("a unlabelled: %v", ev)
		}

		s.ExpireHistory()
		old, err := c.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
		if err != nil {
			t.Fatal(err)
		}
		ev := <-old.ResultChan()
		if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != 410 {
			t.Errorf("watch from a forgotten version: %v", ev)
		}
		if _, open := <-old.ResultChan(); open {
			t.Error("the expired watch stayed open")
		}
	})
}

// TestInformer: client-go's informer (with watch-list, as in production)
// follows the store, and a severed client's requests fail.
func TestInformer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore()
		c := s.Client(NodeIdentity("a"))
		_, _ = s.CreateNode(node("a", map[string]string{"claim": "waiting"}))
		nodes := c.Kube.CoreV1().Nodes()
		inf := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = "claim"
				return nodes.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = "claim"
				return nodes.Watch(ctx, o)
			},
		}, &corev1.Node{}, 0, cache.Indexers{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The bubble must end with the informer gone: after the sever, its
		// reflector may sleep in its watch error handler, and a bubble
		// whose main goroutine has returned does not move its clock.
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			inf.RunWithContext(ctx)
		}()
		defer func() {
			cancel()
			<-stopped
		}()
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("not synced")
		}
		_, _ = s.CreateNode(node("b", map[string]string{"claim": "holding"}))
		synctest.Wait()
		if got := len(inf.GetStore().List()); got != 2 {
			t.Errorf("informer has %d nodes, want 2", got)
		}
		s.EndWatches("")
		_, _ = s.CreateNode(node("c", map[string]string{"claim": "holding"}))
		time.Sleep(10 * time.Second) // the reflector's back-off
		synctest.Wait()
		if got := len(inf.GetStore().List()); got != 3 {
			t.Errorf("after the watch ended, informer has %d nodes, want 3", got)
		}
		c.Sever()
		if _, err := nodes.Get(ctx, "a", metav1.GetOptions{}); !errors.Is(err, ErrSevered) {
			t.Errorf("severed: %v", err)
		}
		cancel()
	})
}

// TestListBySelector: a List from the label index returns what matching
// every Node returns, for ranges (the index of numbers) as for values,
// after labels come, change and go; a limited page says more remain.
func TestListBySelector(t *testing.T) {
	s := NewStore()
	c := s.Client(Admin).Kube.CoreV1().Nodes()
	ctx := context.Background()
	for i, since := range []string{"10", "20", "30", "40", "x", ""} {
		l := map[string]string{"claim": "waiting", "since": since}
		if since == "" {
			l = map[string]string{"claim": "holding"}
		}
		if _, err := s.CreateNode(node(fmt.Sprintf("n%d", i), l)); err != nil {
			t.Fatal(err)
		}
	}
	list := func(sel string, limit int64) (names []string, more bool) {
		t.Helper()
		l, err := c.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: limit})
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		for _, n := range l.Items {
			names = append(names, n.Name)
		}
		return names, l.Continue != ""
	}
	check := func(when string) {
		t.Helper()
		all, _ := list("", 0)
		// The count of the cluster: a first page with no selector says
		// how many remain.
		l, err := c.List(ctx, metav1.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 2 || l.Items[0].Name != all[0] || l.Items[1].Name != all[1] ||
			l.RemainingItemCount == nil || *l.RemainingItemCount != int64(len(all)-2) || l.Continue == "" {
			t.Errorf("%s: no selector, limit 2: got %d items, %d remaining (-1: not said), continue %q; want %v and %d remaining",
				when, len(l.Items), ptr.Deref(l.RemainingItemCount, -1), l.Continue, all[:2], len(all)-2)
		}
		for _, sel := range []string{"since>15", "since<35", "since>15,since<35", "since>20", "since<30", "since>20,since<40", "claim=waiting,since<25", "since>100", "since", "claim!=waiting", "claim=waiting,since>0", "claim=waiting,since!=40", "claim=waiting,since notin (10,30)"} {
			ls, _ := labels.Parse(sel)
			var want []string
			for _, name := range all {
				if ls.Matches(labels.Set(s.Node(name).Labels)) {
					want = append(want, name)
				}
			}
			if got, _ := list(sel, 0); !slices.Equal(got, want) {
				t.Errorf("%s: %s: got %v, want %v", when, sel, got, want)
			}
			if len(want) > 1 {
				got, more := list(sel, 1)
				if !slices.Equal(got, want[:1]) || !more {
					t.Errorf("%s: %s, limit 1: got %v (more %v), want %v and more", when, sel, got, more, want[:1])
				}
			}
		}
	}
	check("created")
	if err := s.UpdateNode("n1", Admin, func(n *corev1.Node) { n.Labels["since"] = "50" }); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateNode("n0", Admin, func(n *corev1.Node) { n.Labels = nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNode("n2"); err != nil {
		t.Fatal(err)
	}
	check("changed")
}

// TestMeterCountsEveryClient: the Meter counts the requests of the typed
// client and of the metadata client alike (the lock reads the queue with
// the second), each under its kind, with the bytes of their replies and of
// their watch events.
func TestMeterCountsEveryClient(t *testing.T) {
	s := NewStore()
	s.Meter = NewMeter()
	for i := range 3 {
		if _, err := s.CreateNode(node(fmt.Sprintf("n%d", i), map[string]string{"claim": "waiting"})); err != nil {
			t.Fatal(err)
		}
	}
	c := s.Client(NodeIdentity("n0"))
	ctx := context.Background()
	if _, err := c.Kube.CoreV1().Nodes().Get(ctx, "n0", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := c.Meta.Resource(corev1.SchemeGroupVersion.WithResource("nodes"))
	if _, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: "claim=waiting", Limit: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := nodes.Watch(ctx, metav1.ListOptions{LabelSelector: "claim"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := s.UpdateNode("n2", Admin, func(n *corev1.Node) { n.Labels["claim"] = "holding" }); err != nil {
		t.Fatal(err)
	}
	<-w.ResultChan()

	kinds := s.Meter.Kinds()
	for _, want := range []string{"get nodes (one)", "list nodes label=claim=waiting limit (metadata)", "get nodes (one) (metadata)", "watch nodes label=claim (metadata)"} {
		if kinds[want].Requests != 1 {
			t.Errorf("%q: %d requests, want 1 (kinds: %v)", want, kinds[want].Requests, kinds)
		}
	}
	if b := kinds["list nodes label=claim=waiting limit (metadata)"].Bytes; b == 0 {
		t.Error("the metadata List's reply counted no bytes")
	}
	if b := kinds["watch events"].Bytes; b == 0 {
		t.Error("the watch event counted no bytes")
	}
	if f := s.Meter.Figures(); f.Requests != 4 {
		t.Errorf("%d requests in all, want 4", f.Requests)
	}
}

// TestConfigMapWatch: a node may list and watch the one ConfigMap it may
// read, by name, and sees an admin's writes to it, in order; without the
// name, or for another ConfigMap, it is refused, as RBAC's resourceNames
// refuse it.
func TestConfigMapWatch(t *testing.T) {
	s := NewStore()
	cms := s.Client(NodeIdentity("a")).Kube.CoreV1().ConfigMaps("kube-system")
	ctx := context.Background()
	byName := metav1.ListOptions{FieldSelector: "metadata.name=kured-host"}
	for _, o := range []metav1.ListOptions{{}, {FieldSelector: "metadata.name=other"}} {
		if _, err := cms.List(ctx, o); !apierrors.IsForbidden(err) {
			t.Errorf("list %q: %v, want forbidden", o.FieldSelector, err)
		}
		if _, err := cms.Watch(ctx, o); !apierrors.IsForbidden(err) {
			t.Errorf("watch %q: %v, want forbidden", o.FieldSelector, err)
		}
	}
	list, err := cms.List(ctx, byName)
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("list by name before there is one: %v, %v", list, err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: byName.FieldSelector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s.SetConfigMap("kube-system", "other", map[string]string{"x": "1"})
	s.SetConfigMap("kube-system", "kured-host", map[string]string{"paused": "a"})
	s.EditConfigMap("kube-system", "kured-host", func(d map[string]string) { d["paused"] = "b" })
	s.SetConfigMap("kube-system", "kured-host", nil)
	var got []string
	for range 3 {
		var e watch.Event
		select {
		case e = <-w.ResultChan():
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %q; no more within 10 s", got)
		}
		cm := e.Object.(*corev1.ConfigMap)
		got = append(got, fmt.Sprintf("%s %s=%s", e.Type, cm.Name, cm.Data["paused"]))
	}
	want := []string{"ADDED kured-host=a", "MODIFIED kured-host=b", "DELETED kured-host=b"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
