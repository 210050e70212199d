package cycletest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/test/cluster"
)

// The second review's bugs whose fault a real API server lets a test make
// (docs/claims.md, "What checks it"); the simulator's TestRegressions has
// all of them on virtual time.

// TestSecondBootDuringReleaseDelay (S2): the node crashes and boots again
// while it holds the slot for the release delay, and its kubelet reports
// the new boot only 8 s later. The slot is released only once the Node
// shows the current boot Ready.
func TestSecondBootDuringReleaseDelay(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	n := startNode(t, ctx, nodeSpec{name: "second-boot", kubeletDelay: 8 * time.Second, config: func(c *config.Config) {
		c.Lock.ReleaseDelay = config.Duration(3 * time.Second)
	}})
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(name string) bool { return name == n.h.Name }
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the release delay", func() bool {
		_, c, _ := claimOf(t, ctx, n.h.Name)
		return c.Phase == claim.PhaseReleasing
	})
	rebooted := make(chan error, 1)
	go func() { rebooted <- n.h.Reboot(ctx) }() // unplanned: nobody asked
	if err := <-rebooted; err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the release", func() bool {
		st, _, _ := claimOf(t, ctx, n.h.Name)
		return st == ""
	})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(claim.Limits{Concurrency: 1}); err != nil {
		t.Error(err)
	}
	final := n.h.BootID()
	held := false
	for _, s := range a.History() {
		if s.Node != n.h.Name {
			continue
		}
		if s.ClaimLabel != "" {
			held = true
			continue
		}
		if held {
			if s.BootID != final || !s.Ready {
				t.Errorf("rv %d: released while the Node shows boot %.8s (ready %v); the host is in boot %.8s", s.RV, s.BootID, s.Ready, final)
			}
			break
		}
	}
	if n.h.Boots() != 3 {
		t.Errorf("boots %d, want 3 (the planned reboot and the crash)", n.h.Boots())
	}
	timeline(t, a, n.h.Name)
}

// TestUnreadableOwnClaim (S3): while the node reboots, an admin leaves a
// claim annotation that cannot be read on it. Back from the reboot, the
// daemon never releases or rewrites that claim and says so (an Event),
// until the admin removes it; then it undoes its own cordon (from the
// cordon's annotation) and is done.
func TestUnreadableOwnClaim(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	n := startNode(t, ctx, nodeSpec{name: "unreadable-own", down: 3 * time.Second})
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the reboot", func() bool {
		_, c, _ := claimOf(t, ctx, n.h.Name)
		return c.Phase == claim.PhaseRebooting
	})
	const garbage = "{not json"
	adminPatch(t, ctx, n.h.Name, map[string]any{"annotations": map[string]any{claim.Annotation: garbage}})
	expectEvent(t, ctx, n.h.Name, "UnreadableClaim", "leaves it alone")
	if n.h.Boots() != 2 {
		t.Fatalf("boots %d, want 2", n.h.Boots())
	}
	// Left alone: for a while, the claim and the cordon stay as they are.
	for range 10 {
		node, err := cp.Admin.CoreV1().Nodes().Get(ctx, n.h.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Annotations[claim.Annotation] != garbage || node.Labels[claim.Label] != string(claim.Holding) || !node.Spec.Unschedulable {
			t.Fatalf("the daemon changed its unreadable claim: label %q, annotation %q, unschedulable %v",
				node.Labels[claim.Label], node.Annotations[claim.Annotation], node.Spec.Unschedulable)
		}
		time.Sleep(500 * time.Millisecond)
	}
	adminPatch(t, ctx, n.h.Name, map[string]any{
		"labels": map[string]any{claim.Label: nil}, "annotations": map[string]any{claim.Annotation: nil},
	})
	waitFor(t, ctx, "the uncordon after the admin removed the claim", func() bool {
		st, _, unsched := claimOf(t, ctx, n.h.Name)
		return st == "" && !unsched
	})
	if !strings.Contains(n.logs(), "own claim cannot be read; leaving it alone") {
		t.Errorf("the log does not say why the claim was kept:\n%s", tail(n.logs(), 3000))
	}
}

// TestClaimRemovedMidDrain (L2, evictions without a claim): an admin
// removes the claim while the drain is held back by a budget, then
// deletes the budget. The drain confirms the claim before each eviction:
// it evicts nothing more, the node goes through the lost path (uncordoned,
// SlotLost) and does not reboot.
func TestClaimRemovedMidDrain(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	n := startNode(t, ctx, nodeSpec{name: "lost-mid-drain", config: func(c *config.Config) {
		c.Drain.Timeout = config.Duration(time.Minute)
	}})
	const ns = "lost-mid-drain"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "guarded"}
	rs, err := cp.ReplicaSet(ctx, ns, "guarded", 1, labels)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Pod(ctx, n.h, ns, "guarded-0", cluster.Replicated, rs, labels); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitRunning(ctx, ns, "guarded-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.PDB(ctx, ns, "guarded", 1, labels); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitPDB(ctx, ns, "guarded", 0); err != nil {
		t.Fatal(err)
	}
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	// Held back: the phase is recorded before the first eviction, and a
	// claim removed before the budget refused one would not test the
	// confirmation of the library's retries.
	waitFor(t, ctx, "the drain held back by the budget", func() bool {
		_, c, _ := claimOf(t, ctx, n.h.Name)
		return c.Phase == claim.PhaseDraining && strings.Contains(n.logs(), "disruption budget")
	})
	// No new cycle after this one: the sentinel goes, the drain goes on.
	if err := n.h.SetRebootRequired(false); err != nil {
		t.Fatal(err)
	}
	adminPatch(t, ctx, n.h.Name, map[string]any{
		"labels": map[string]any{claim.Label: nil}, "annotations": map[string]any{claim.Annotation: nil},
	})
	if err := cp.Admin.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "guarded", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ctx, n.h.Name, "SlotLost", "taken away before the reboot")
	waitFor(t, ctx, "the uncordon", func() bool {
		st, _, unsched := claimOf(t, ctx, n.h.Name)
		return st == "" && !unsched
	})
	// The library retries an eviction every 5 s: well past the next one.
	time.Sleep(7 * time.Second)
	if _, err := cp.Admin.CoreV1().Pods(ns).Get(ctx, "guarded-0", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("guarded-0 was evicted after the claim was removed")
	} else if err != nil {
		t.Fatal(err)
	}
	if n.h.Boots() != 1 {
		t.Errorf("boots %d: the node rebooted without its claim", n.h.Boots())
	}
}

// adminPatch merges metadata into a Node as the cluster's admin.
func adminPatch(t *testing.T, ctx context.Context, node string, metadata map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
