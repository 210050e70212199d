package cycletest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// TestClusterSettings: an operator raises the concurrency for the whole
// cluster with `kured-host settings apply`, the real binary and an
// admin's kubeconfig: the nodes (whose files set no limit) take two slots
// at once, and the auditor finds nothing. A file that is not valid is
// refused before anything is written (exit 2, its line named); a bad
// object written with kubectl changes nothing on the nodes, which say so
// (SettingsInvalid), and check fails on it.
func TestClusterSettings(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(admin, "settings-admin", []string{"system:masters"}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errs bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", admin)...)
		cmd.Stdout, cmd.Stderr = &out, &errs
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), out.String(), errs.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String(), errs.String()
	}
	t.Cleanup(func() {
		_ = cp.Admin.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "kured-host", metav1.DeleteOptions{})
	})
	bad := filepath.Join(dir, "bad.toml")
	good := filepath.Join(dir, "good.toml")
	for p, text := range map[string]string{bad: "[lock]\nconcurrency = 2\n[drain]\ntimeout = \"1m\"\n", good: "# for every node\n[lock]\nconcurrency = 2\n"} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errs := run("settings", "apply", "-f", bad); code != 2 || !strings.Contains(errs, ":4: drain.timeout: not a cluster setting") {
		t.Errorf("apply of a bad file: exit %d, stderr %q; want 2 and the key named", code, errs)
	}
	if code, out, errs := run("settings", "apply", "-f", good); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := run("settings"); code != 0 || !strings.Contains(out, "concurrency = 2  # "+config.ClusterSource+":3") {
		t.Errorf("settings (exit %d) does not show the concurrency from the settings:\n%s", code, out)
	}

	var nodes []*node
	for i := range 4 {
		nodes = append(nodes, startNode(t, ctx, nodeSpec{name: fmt.Sprintf("settings-%d", i), stop: 300 * time.Millisecond, edit: withoutLimits}))
	}
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return strings.HasPrefix(n, "settings-") }
	workload(t, ctx, "settings", nodes)
	for _, n := range nodes {
		if err := n.h.SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	expectEvent(t, ctx, nodes[0].h.Name, "SettingsApplied", "at most 2 node(s) of the cluster at once")
	waitDone(t, ctx, nodes...)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(claim.Limits{Concurrency: 2}); err != nil {
		t.Error(err)
	}
	if most, _ := a.MaxHolders(""); most != 2 {
		t.Errorf("at most %d nodes held a slot at once; want 2, the cluster's setting", most)
	}

	// kubectl writes what apply would refuse: the nodes keep theirs.
	if _, err := cp.Admin.CoreV1().ConfigMaps("kube-system").Patch(ctx, "kured-host", types.MergePatchType,
		[]byte(`{"data":{"config.toml":"[lock]\nconcurrency = 0\n"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node reads the settings from the API server's cache when it
	// joins: under load that cache was behind the patch, the node applied
	// the good settings again and never saw the bad ones.
	waitFor(t, ctx, "the bad settings in the API server's cache", func() bool {
		cm, err := cp.Admin.CoreV1().ConfigMaps("kube-system").Get(ctx, "kured-host", metav1.GetOptions{ResourceVersion: "0"})
		return err == nil && strings.Contains(cm.Data["config.toml"], "concurrency = 0")
	})
	if err := nodes[0].h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ctx, nodes[0].h.Name, "SettingsInvalid", "lock.concurrency")
	if code, out, _ := runStatus(t, ctx, "--kubeconfig", admin, "--config", filepath.Join(dir, "none.toml")); code != 0 ||
		!strings.Contains(out, "! the cluster's settings are not valid, so the nodes keep what they had") || !strings.Contains(out, "lock.concurrency") {
		t.Errorf("status (exit %d) does not name the bad setting:\n%s", code, out)
	}
	waitFor(t, ctx, nodes[0].h.Name+" rebooted again", func() bool {
		st, _, _ := claimOf(t, ctx, nodes[0].h.Name)
		return nodes[0].h.Boots() >= 3 && st == ""
	})
}

// withoutLimits takes lock.concurrency and lock.groups out of a written
// configuration, as config.toml.example ships them: the cluster's
// settings apply.
func withoutLimits(data []byte) []byte {
	var out []string
	inGroups := false
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "[[lock.groups]]":
			inGroups = true
			continue
		case strings.HasPrefix(trimmed, "["):
			inGroups = false
		case inGroups, strings.HasPrefix(trimmed, "concurrency = "):
			continue
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}
