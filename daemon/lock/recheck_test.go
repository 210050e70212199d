package lock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// TestRecheckOwn: at a resync a following node reads its own claim
// again only when the live watch of its Node shows it changed (removed,
// rewritten, the Node recreated) or cannot tell (no watch, not live).
func TestRecheckOwn(t *testing.T) {
	since := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	me := waitingNode(t, "me", "zone-a", claim.Claim{Since: since, Limits: claim.Limits{Concurrency: 1}}, queue.RoleBehind)
	me.UID = "uid-1"
	edited := func(edit func(*corev1.Node)) func() (metav1.Object, bool) {
		return func() (metav1.Object, bool) {
			n := me.DeepCopy()
			edit(n)
			return n, true
		}
	}
	tests := []struct {
		name    string
		watched func() (metav1.Object, bool)
		reads   int64
	}{
		{"no watch", nil, 1},
		{"the watch is not live", func() (metav1.Object, bool) { return nil, false }, 1},
		{"the watch shows the claim as known", edited(func(*corev1.Node) {}), 0},
		{"another change to the Node (the kubelet's)", edited(func(n *corev1.Node) { n.ResourceVersion = "999" }), 0},
		{"the claim removed", edited(func(n *corev1.Node) {
			delete(n.Labels, claim.Label)
			delete(n.Annotations, claim.Annotation)
		}), 1},
		{"the claim rewritten", edited(func(n *corev1.Node) { n.Annotations[claim.Annotation] += " " }), 1},
		{"the state label alone changed", edited(func(n *corev1.Node) { n.Labels[claim.Label] = string(claim.Entering) }), 1},
		{"the Node recreated", edited(func(n *corev1.Node) { n.UID = "uid-2" }), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(me.DeepCopy())
			l := New(Options{Client: client, Node: "me", Limits: claim.Limits{Concurrency: 1}, OwnWatched: tt.watched})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			var gets atomic.Int64
			client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets.Add(1)
				return false, nil, nil
			})
			if err := l.recheckOwn(ctx); err != nil {
				t.Fatal(err)
			}
			if got := gets.Load(); got != tt.reads {
				t.Errorf("%d reads of the own Node, want %d", got, tt.reads)
			}
		})
	}
}
