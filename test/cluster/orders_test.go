package cluster

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kured-host/kured-host/daemon/steer"
)

// requestCounter counts a client's requests by method and path prefix.
type requestCounter struct {
	rt          http.RoundTripper
	getCMs      atomic.Int64 // GET of the ConfigMap by name
	getNodes    atomic.Int64 // GET of a Node by name
	watchesOfCM atomic.Int64 // Lists and watches of ConfigMaps
	nodes       atomic.Int64 // every request about Nodes
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	p := r.URL.Path
	if strings.Contains(p, "/nodes") {
		c.nodes.Add(1)
	}
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/configmaps/"+steer.Name):
		c.getCMs.Add(1)
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/configmaps"):
		c.watchesOfCM.Add(1)
	case r.Method == http.MethodGet && strings.Contains(p, "/nodes/"):
		c.getNodes.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// watchedReader starts the orders' watch with cfg's identity, counting its
// requests, and returns a Reader for the cycle's looks.
func watchedReader(t *testing.T, ctx context.Context, cfg *rest.Config, node string) (steer.Reader, *steer.Watch, *requestCounter) {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	counter := &requestCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &steer.Watch{Client: client, Metadata: meta, Node: node}
	w.Run(ctx)
	return steer.Reader{Client: client, Node: node, Cached: true, Watch: w}, w, counter
}

// TestOrdersWatch: once its watch has filled, a node's looks at the
// operator's orders cost no request, and a pause and a hold set by an
// admin reach them; with an RBAC manifest from before the watch (get on
// the ConfigMap, no list or watch), the watch of the ConfigMap stops at
// the refusal and each look reads it, as before.
func TestOrdersWatch(t *testing.T) {
	ctx := testCtx(t)
	me := newHost(t, ctx, HostOptions{})
	t.Cleanup(func() { _, _, _ = steer.Resume(context.Background(), cp.Admin) })

	r, w, counter := watchedReader(t, ctx, me.Config, me.Name)
	if !w.Filled(ctx, time.Minute) {
		t.Fatal("the orders' watch has not filled in a minute")
	}
	gets, nodeGets := counter.getCMs.Load(), counter.getNodes.Load()
	if err := steer.Pause(ctx, cp.Admin, steer.Order{Reason: "storage migration", By: "alice", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pause to reach the looks", func() bool {
		o, paused, err := r.Pause(ctx)
		return err == nil && paused && o.Reason == "storage migration"
	})
	if _, err := cp.Admin.CoreV1().Nodes().Patch(ctx, me.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+steer.HoldLabel+`":"true"},"annotations":{"`+steer.HoldReason+`":"disk check"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the hold to reach the looks", func() bool {
		o, held, err := r.Hold(ctx)
		return err == nil && held && o.Reason == "disk check"
	})
	if _, _, err := steer.Resume(ctx, cp.Admin); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the end of the pause to reach the looks", func() bool {
		_, paused, err := r.Pause(ctx)
		return err == nil && !paused
	})
	if g, n := counter.getCMs.Load()-gets, counter.getNodes.Load()-nodeGets; g != 0 || n != 0 {
		t.Errorf("the looks read the ConfigMap %d and the Node %d times while the watch was live; want none", g, n)
	}

	// An RBAC manifest from before the watch: get on the ConfigMap, the
	// Nodes as today.
	old := "kured-host-before-watch"
	roles := []any{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: old, Namespace: steer.Namespace}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{steer.Name}, Verbs: []string{"get"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: old, Namespace: steer.Namespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: old},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: old}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: old},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kured-host-node-reader"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: old}}},
	}
	for _, obj := range roles {
		var err error
		switch o := obj.(type) {
		case *rbacv1.Role:
			_, err = cp.Admin.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = cp.Admin.RbacV1().Roles(o.Namespace).Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *rbacv1.RoleBinding:
			_, err = cp.Admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = cp.Admin.RbacV1().RoleBindings(o.Namespace).Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *rbacv1.ClusterRoleBinding:
			_, err = cp.Admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = cp.Admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	certPEM, keyPEM, err := cp.CA.ClientCert("before-watch", []string{old}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: cp.Server, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAData: cp.ServerCA, CertData: certPEM, KeyData: keyPEM}}
	r, w, counter = watchedReader(t, ctx, cfg, me.Name)
	// Filled ends at the refusal, not at its bound.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if w.Filled(fctx, time.Hour) || fctx.Err() != nil {
		t.Errorf("Filled with a watch the API server refuses: want false at the refusal (waited out 2 minutes: %v)", fctx.Err() != nil)
	}
	if err := steer.Pause(ctx, cp.Admin, steer.Order{Reason: "kernel regression", By: "bob", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a look to read the pause with get alone", func() bool {
		o, paused, err := r.Pause(ctx)
		if err != nil {
			t.Fatalf("a look without the watch: %v", err)
		}
		return paused && o.Reason == "kernel regression"
	})
	// client-go's back-off (0.8 s at first) would retry within each
	// 3 s: the first refusal (a watch-list, then a List) has come and
	// gone in the first.
	time.Sleep(3 * time.Second)
	refusals := counter.watchesOfCM.Load()
	time.Sleep(3 * time.Second)
	before := counter.getCMs.Load()
	for range 3 {
		if _, _, err := r.Pause(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if w.Live() {
		t.Error("the watch is live though it may not watch the ConfigMap")
	}
	if n := counter.watchesOfCM.Load(); n != refusals || n == 0 {
		t.Errorf("Lists and watches of the ConfigMap: %d 3 s after the start, %d 3 s later; want the watch stopped after at least one refusal", refusals, n)
	}
	if g := counter.getCMs.Load() - before; g != 3 {
		t.Errorf("3 looks read the ConfigMap %d times; want 3 (no watch to answer them)", g)
	}
}
