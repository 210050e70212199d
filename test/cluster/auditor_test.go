package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kured-host/kured-host/daemon/claim"
)

// setClaim writes a claim on a node as its owner would (with the node's
// own credentials); state "" removes it.
func setClaim(t *testing.T, ctx context.Context, h *SimHost, state claim.State, c claim.Claim) {
	t.Helper()
	var label, ann any
	if state != "" {
		c.State = state
		if c.Limits.Concurrency == 0 {
			c.Limits.Concurrency = 1
		}
		s, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		label, ann = string(state), s
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{claim.Label: label},
		"annotations": map[string]any{claim.Annotation: ann},
	}})
	if _, err := h.Client.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setUnschedulable(t *testing.T, ctx context.Context, h *SimHost, on bool) {
	t.Helper()
	body := `{"spec":{"unschedulable":null}}`
	if on {
		body = `{"spec":{"unschedulable":true}}`
	}
	if _, err := h.Client.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func scopedAuditor(t *testing.T, ctx context.Context, hosts ...*SimHost) *Auditor {
	t.Helper()
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	names := map[string]bool{}
	for _, h := range hosts {
		names[h.Name] = true
	}
	a.Scope = func(n string) bool { return names[n] }
	return a
}

// expectViolation fails unless one of vs is about node and says want.
func expectViolation(t *testing.T, check string, vs []Violation, node, want string) {
	t.Helper()
	for _, v := range vs {
		if v.Node == node && strings.Contains(v.What, want) {
			return
		}
	}
	t.Errorf("%s did not catch %q on %s; it reported %v", check, want, node, vs)
}

// TestAuditorCatchesViolations injects each kind of violation by hand and
// checks that the auditor reports it, so that a passing run means
// something; then a correct cycle that it must not report.
func TestAuditorCatchesViolations(t *testing.T) {
	ctx := testCtx(t)
	zone := func(z string) HostOptions {
		return HostOptions{Labels: map[string]string{"topology.kubernetes.io/zone": z}, DownTime: 100 * time.Millisecond}
	}
	a1, a2, b1 := newHost(t, ctx, zone("a")), newHost(t, ctx, zone("a")), newHost(t, ctx, zone("b"))
	good := newHost(t, ctx, zone("c"))
	a := scopedAuditor(t, ctx, a1, a2, b1, good)
	zoneRule := claim.GroupLimit{Label: "topology.kubernetes.io/zone", Max: 1}

	// Too many holders, globally and in zone a.
	setClaim(t, ctx, a1, claim.Holding, claim.Claim{BootID: a1.BootID()})
	setClaim(t, ctx, a2, claim.Holding, claim.Claim{BootID: a2.BootID()})
	// A reboot without a slot.
	if err := b1.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	// A release without a reboot.
	setClaim(t, ctx, a2, "", claim.Claim{})
	// Cordoned while holding, then left cordoned after releasing (a1 also
	// releases without a reboot).
	setUnschedulable(t, ctx, a1, true)
	setClaim(t, ctx, a1, "", claim.Claim{})

	// A correct cycle: wait, enter, hold, cordon, reboot, uncordon, release.
	setClaim(t, ctx, good, claim.Waiting, claim.Claim{})
	setClaim(t, ctx, good, claim.Entering, claim.Claim{})
	setClaim(t, ctx, good, claim.Holding, claim.Claim{BootID: good.BootID()})
	setUnschedulable(t, ctx, good, true)
	if err := good.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	setUnschedulable(t, ctx, good, false)
	setClaim(t, ctx, good, "", claim.Claim{})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	expectViolation(t, "CheckLimits", a.CheckLimits(claim.Limits{Concurrency: 1}), a2.Name, "2 holders")
	expectViolation(t, "CheckLimits", a.CheckLimits(claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{zoneRule}}), a2.Name, "in topology.kubernetes.io/zone=a, limit 1")
	expectViolation(t, "CheckRebootsHeld", a.CheckRebootsHeld(), b1.Name, "without holding a slot")
	expectViolation(t, "CheckReleases", a.CheckReleases(), a2.Name, "released the slot in the boot it took it in")
	expectViolation(t, "CheckNotLeftCordoned", a.CheckNotLeftCordoned(), a1.Name, "left cordoned")
	if err := a.Check(claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{zoneRule}}); err == nil {
		t.Error("Check found nothing")
	}

	// The correct cycle alone is clean.
	a.Scope = func(n string) bool { return n == good.Name }
	if err := a.Check(claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{zoneRule}}); err != nil {
		t.Errorf("a correct cycle was reported: %v", err)
	}
}

// TestAuditorAcceptsAbort: a holder that gives up before rebooting, records
// it and puts the node back as it was may release in the same boot.
func TestAuditorAcceptsAbort(t *testing.T) {
	ctx := testCtx(t)
	h := newHost(t, ctx, HostOptions{})
	a := scopedAuditor(t, ctx, h)
	setClaim(t, ctx, h, claim.Holding, claim.Claim{BootID: h.BootID()})
	setUnschedulable(t, ctx, h, true)
	setUnschedulable(t, ctx, h, false)
	setClaim(t, ctx, h, claim.Holding, claim.Claim{BootID: h.BootID(), Phase: claim.PhaseAborted})
	setClaim(t, ctx, h, "", claim.Claim{})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(claim.Limits{Concurrency: 1}); err != nil {
		t.Errorf("an aborted attempt was reported: %v", err)
	}
}
