package lock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/marks"
	k8stesting "k8s.io/client-go/testing"
)

// TestNodeCount: the count that paces the joins is read at start-up (in
// the first Own, before the daemon says it is ready) and
// again every few hours (a cluster grows while the daemon runs for
// weeks), and not in the join, where every node of a cluster that learns
// of an update at once would add it to the burst the count spreads.
func TestNodeCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
		client := fake.NewClientset(node("me"), node("n2"), node("n3"))
		l := New(Options{Client: client, Node: "me", Limits: claim.Limits{Concurrency: 1}})
		var listed atomic.Int64
		client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			listed.Add(1)
			return false, nil, nil
		})
		// counts is the reads of the count so far, nodes the count kept.
		counts := func() (int64, int) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return listed.Load(), l.nodes
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if c, _ := counts(); c != 0 {
			t.Fatalf("%d counts before the own claim was read; want none", c)
		}
		if _, _, err := l.Own(ctx); err != nil {
			t.Fatal(err)
		}
		// Read by then: the daemon is ready after its first Own, and an
		// idle daemon makes no request.
		if c, n := counts(); c != 1 || n != 3 {
			t.Fatalf("at start-up: %d counts, %d nodes; want 1 count of 3 nodes", c, n)
		}
		if _, _, err := l.Own(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if c, _ := counts(); c != 1 {
			t.Fatalf("a second Own read the count again (%d counts)", c)
		}

		if err := l.Join(ctx, marks.Change{}); err != nil {
			t.Fatal(err)
		}
		if l.current().state == "" {
			t.Fatal("not in the queue after Join")
		}
		if c, _ := counts(); c != 1 {
			t.Errorf("the join read the count again (%d counts)", c)
		}

		// The cluster grows; the next count, within 2·countEvery, sees it.
		if _, err := client.CoreV1().Nodes().Create(ctx, node("n4"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(countEvery - time.Minute)
		synctest.Wait()
		if c, _ := counts(); c != 1 {
			t.Errorf("read again before countEvery: %d counts", c)
		}
		time.Sleep(countEvery + 2*time.Minute)
		synctest.Wait()
		if c, n := counts(); c != 2 || n != 4 {
			t.Errorf("after 2·countEvery: %d counts, %d nodes; want 2 counts, 4 nodes", c, n)
		}
		cancel()
		synctest.Wait()
	})
}

// TestNodeCountAfterReboot: a daemon that starts holding a slot (back
// after its reboot) does not read the count at start-up: its next need is
// days away, and the count is read within the first period.
func TestNodeCountAfterReboot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		acquired := time.Now().Add(-time.Minute)
		c, err := claim.Claim{Since: acquired, Acquired: &acquired, Limits: claim.Limits{Concurrency: 1}, State: claim.Holding, Phase: claim.PhaseRebooting, BootID: "b0"}.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		me := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "me",
			Labels: map[string]string{claim.Label: string(claim.Holding)}, Annotations: map[string]string{claim.Annotation: c}}}
		client := fake.NewClientset(me, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
		l := New(Options{Client: client, Node: "me", Limits: claim.Limits{Concurrency: 1}})
		var listed atomic.Int64
		client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			listed.Add(1)
			return false, nil, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, st, err := l.Own(ctx); err != nil || st != claim.Holding {
			t.Fatalf("own claim %q, %v; want holding", st, err)
		}
		synctest.Wait()
		if n := listed.Load(); n != 0 {
			t.Errorf("%d counts at start-up while holding; want none", n)
		}
		time.Sleep(2*countEvery + time.Minute)
		synctest.Wait()
		if n := listed.Load(); n != 1 {
			t.Errorf("%d counts after 2·countEvery; want 1", n)
		}
		cancel()
		synctest.Wait()
	})
}
