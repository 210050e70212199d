package cycletest

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// TestPauseAndHold is an operator steering a roll with the real binary
// and an admin's kubeconfig: one node held before the roll; the cluster
// paused once the first node holds its slot. Nothing announces after the
// pause; the holder finishes; the waiting nodes keep their places and
// say why; status shows the pause and the hold. After the resume the
// others reboot in their queue order, the held node still out; after
// the unhold it reboots too. The auditor finds nothing.
func TestPauseAndHold(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(admin, "steer-admin", []string{"system:masters"}); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", admin)...)
		cmd.Stdout, cmd.Stderr = &out, &errs
		if err := cmd.Run(); err != nil {
			t.Fatalf("kured-host %s: %v\n%s", strings.Join(args, " "), err, errs.String())
		}
		t.Logf("kured-host %s:\n%s", strings.Join(args, " "), out.String())
		return out.String()
	}
	var nodes []*node
	for i := range 4 {
		nodes = append(nodes, startNode(t, ctx, nodeSpec{name: fmt.Sprintf("steer-%d", i)}))
	}
	held := nodes[3]
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return strings.HasPrefix(n, "steer-") }

	if out := kubectl("hold", held.h.Name, "--reason", "firmware check"); !strings.Contains(out, "held "+held.h.Name+": ") {
		t.Errorf("hold says %q", out)
	}
	for _, n := range nodes {
		if err := n.h.SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	var first *node
	waitFor(t, ctx, "a node holding its slot", func() bool {
		for _, n := range nodes {
			if st, _, _ := claimOf(t, ctx, n.h.Name); st == claim.Holding {
				first = n
				return true
			}
		}
		return false
	})
	paused := time.Now()
	kubectl("pause", "--reason", "incident 42")
	waitDone(t, ctx, first)
	// Two looks of every node (2 s each) and then some: nothing moves.
	time.Sleep(6 * time.Second)
	var waiting []*node
	for _, n := range nodes {
		st, _, _ := claimOf(t, ctx, n.h.Name)
		switch {
		case n == first:
		case n == held && (st != "" || n.h.Boots() != 1):
			t.Errorf("held %s: claim %q, boots %d", n.h.Name, st, n.h.Boots())
		case n != held && (st != claim.Waiting || n.h.Boots() != 1):
			t.Errorf("%s during the pause: claim %q, boots %d; want waiting, not rebooted", n.h.Name, st, n.h.Boots())
		case n != held:
			waiting = append(waiting, n)
		}
	}
	if len(waiting) > 0 {
		expectEvent(t, ctx, waiting[0].h.Name, "Paused", "reboots are paused for the cluster")
	}
	expectEvent(t, ctx, held.h.Name, "Blocked", "this node is held")
	code, out, _ := runStatus(t, ctx, "--kubeconfig", admin, "--config", filepath.Join(dir, "none.toml"))
	for _, want := range []string{"PAUSED: since ", "incident 42", "held: " + held.h.Name + ", since ", "firmware check", "the cluster's pause: it keeps its place"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("status (exit %d) lacks %q:\n%s", code, want, out)
		}
	}

	resumed := time.Now()
	if out := kubectl("resume"); !strings.Contains(out, "incident 42") {
		t.Errorf("resume says %q", out)
	}
	waitDone(t, ctx, waiting...)
	if st, _, _ := claimOf(t, ctx, held.h.Name); st != "" || held.h.Boots() != 1 {
		t.Errorf("held %s after the resume: claim %q, boots %d", held.h.Name, st, held.h.Boots())
	}
	kubectl("unhold", held.h.Name)
	waitDone(t, ctx, held)

	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(claim.Limits{Concurrency: 1}); err != nil {
		t.Error(err)
	}
	// Announces: none later than the one in flight when the pause was
	// written; after the resume, in queue order.
	var last time.Time
	var order []time.Time
	prev := map[string]string{}
	for _, st := range a.History() {
		was := prev[st.Node]
		prev[st.Node] = st.ClaimLabel
		if was != string(claim.Waiting) || st.ClaimLabel != string(claim.Entering) {
			continue
		}
		if st.Seen.After(paused) && st.Seen.Before(resumed) {
			last = st.Seen
		}
		if st.Seen.After(resumed) && st.Node != held.h.Name {
			order = append(order, st.Claim.Since)
		}
	}
	if !last.IsZero() && last.Sub(paused) > time.Second {
		t.Errorf("a node announced %s after the pause was written", last.Sub(paused).Round(time.Millisecond))
	}
	t.Logf("pause to the last new slot taken: %s (zero: none after it)", max(last.Sub(paused), 0).Round(time.Millisecond))
	if !slices.IsSortedFunc(order, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Errorf("after the resume the nodes announced out of their queue order: %v", order)
	}
	if len(order) != len(waiting) {
		t.Errorf("%d announces after the resume, want %d", len(order), len(waiting))
	}
}
