package status

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/kube"
)

// The real API server (consistent List, RBAC, the binary) is tested in
// test/cluster/cycletest (TestStatus); these use client-go's fake.

func seedClient(t *testing.T) *fake.Clientset {
	var objs []runtime.Object
	for _, f := range fixtures() {
		if f.name == "seed" {
			for _, n := range f.nodes {
				n := n.node(t)
				objs = append(objs, &n)
			}
		}
	}
	return fake.NewClientset(objs...)
}

func TestSourceRead(t *testing.T) {
	s := &Source{Client: seedClient(t), Local: local(3, 1, nil), Now: func() time.Time { return now }}
	r, err := s.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.NodesTotal != 8 || r.Summary.Participants != 6 || r.Summary.Holding != 2 || r.Nodes[0].Name != "node-a1" {
		t.Errorf("report %+v", r.Summary)
	}
}

func TestSourceForbidden(t *testing.T) {
	c := seedClient(t)
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New(`User "jane" cannot list resource "nodes"`))
	})
	// The node may get (its own Node), not list or watch.
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		r.Status.Allowed = r.Spec.ResourceAttributes.Verb == "get"
		return true, r, nil
	})
	c.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		r := &authenticationv1.SelfSubjectReview{}
		r.Status.UserInfo.Username, r.Status.UserInfo.Groups = "system:node:node-a1", []string{"system:nodes"}
		return true, r, nil
	})
	_, err := (&Source{Client: c}).Read(context.Background())
	if !errors.Is(err, kube.ErrNoNodeRead) {
		t.Fatalf("got %v, want ErrNoNodeRead", err)
	}
	for _, want := range []string{"system:node:node-a1 may not list, watch Nodes", "kured-host rbac | kubectl apply -f -", `cannot list resource "nodes"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestAccessError(t *testing.T) {
	cause := errors.New("forbidden")
	node := AccessError("system:node:n1", []string{"system:nodes", "system:authenticated"}, []string{"list", "watch"}, cause)
	for _, want := range []string{"system:node:n1 may not list, watch Nodes", "a node may read only its own Node", "kured-host rbac | kubectl apply -f -"} {
		if !strings.Contains(node.Error(), want) {
			t.Errorf("node: lacks %q:\n%v", want, node)
		}
	}
	user := AccessError("", nil, []string{"list"}, cause)
	for _, want := range []string{"these credentials may not list Nodes", "an admin's"} {
		if !strings.Contains(user.Error(), want) {
			t.Errorf("user: lacks %q:\n%v", want, user)
		}
	}
}

// TestSourceWatch: a snapshot at once, another soon after a Node changes
// (well before the interval), and a clean stop when ctx ends.
func TestSourceWatch(t *testing.T) {
	c := seedClient(t)
	s := &Source{Client: c, Local: local(3, 1, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var shown []Report
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(ctx, time.Hour, func(r Report) error {
			mu.Lock()
			shown = append(shown, r)
			mu.Unlock()
			return nil
		})
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(shown)
	}
	deadline := time.After(10 * time.Second)
	// Change a Node until a second snapshot shows it (the fake's watch
	// may start after the first change).
	for i := 0; count() < 2; i++ {
		n, err := c.CoreV1().Nodes().Get(ctx, "node-c2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels[claim.Label] = string(claim.Waiting)
		n.Annotations[claim.Annotation] = `{"v":1,"state":"waiting","since":"2026-11-29T11:59:00Z","limits":{"concurrency":3}}`
		n.Labels["touch"] = strings.Repeat("x", i%5+1)
		if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-deadline:
			t.Fatalf("%d snapshots after 10 s, want a second one on the change", count())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watch returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not stop on cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	if last := shown[len(shown)-1]; last.Summary.Participants != 7 {
		t.Errorf("last snapshot has %d participants, want 7", last.Summary.Participants)
	}
}
