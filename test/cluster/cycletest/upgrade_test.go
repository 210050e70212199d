package cycletest

import (
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// TestEarlierVersionsSlot: an earlier version took the slot (phase
// acquired: its commit did not cordon, a write of its own did) and was
// upgraded before that write. This version finishes the slot: the
// blockers' last look, then the cordon recorded in the claim's own write,
// the drain, one reboot, the release, uncordoned.
func TestEarlierVersionsSlot(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	n := startNode(t, ctx, nodeSpec{name: "earlier-slot"})
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(name string) bool { return name == n.h.Name }
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	limits := baseConfig().Lock.Limits()
	c := claim.Claim{State: claim.Holding, Since: now.Add(-time.Minute), Updated: now, Acquired: &now,
		Limits: limits, Groups: map[string]string{}, BootID: n.h.BootID(), Phase: claim.PhaseAcquired}
	ann, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	adminPatch(t, ctx, n.h.Name, map[string]any{
		"labels": map[string]any{claim.Label: string(claim.Holding)}, "annotations": map[string]any{claim.Annotation: ann},
	})
	if err := n.h.RestartService("kured-host"); err != nil { // the upgrade
		t.Fatal(err)
	}
	waitDone(t, ctx, n)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(limits); err != nil {
		t.Error(err)
	}
	if b := n.h.Boots(); b != 2 {
		t.Errorf("booted %d times, want 2 (one reboot)", b)
	}
	if st, _, unsched := claimOf(t, ctx, n.h.Name); st != "" || unsched {
		t.Errorf("claim %q, unschedulable %v; want released and schedulable", st, unsched)
	}
	cordoned := false
	for _, s := range a.History() {
		if s.Node == n.h.Name && s.ClaimLabel == string(claim.Holding) && s.Claim.Acquired != nil && s.Claim.Acquired.Equal(now) &&
			s.Claim.Phase != claim.PhaseAcquired && s.Claim.Cordoned && s.Unschedulable {
			cordoned = true
			break
		}
	}
	if !cordoned {
		t.Error("no revision of the slot shows the cordon recorded and made")
	}
	timeline(t, a, n.h.Name)
}
