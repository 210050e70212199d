package cluster

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
)

// ClaimOf reads a node's claim as the admin sees it (state "" when there
// is none; an unreadable claim comes back zero, with its state), and
// whether the node is unschedulable.
func (cp *ControlPlane) ClaimOf(tb testing.TB, ctx context.Context, node string) (claim.State, claim.Claim, bool) {
	tb.Helper()
	n, err := cp.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	lv := n.Labels[claim.Label]
	if lv == "" {
		return "", claim.Claim{}, n.Spec.Unschedulable
	}
	c, _ := claim.Parse(lv, n.Annotations[claim.Annotation])
	return claim.State(lv), c, n.Spec.Unschedulable
}

// WaitFor checks cond every interval until it holds, and fails tb if ctx
// ends first.
func WaitFor(tb testing.TB, ctx context.Context, what string, every time.Duration, cond func() bool) {
	tb.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			tb.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(every):
		}
	}
}
