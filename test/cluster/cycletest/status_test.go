package cycletest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/status"
	"github.com/kured-host/kured-host/test/cluster"
)

// TestStatus runs `kured-host status` against the real API server: five
// hosts whose claims are written with their own credentials (concurrency
// 3, one per zone: two holders; three waiting, one blocked by its zone,
// one eligible, one without a zone label), and one host running the real
// daemon, which joins the queue in a full zone; then an unreadable claim,
// --watch, and credentials that may not list Nodes.
func TestStatus(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(admin, "status-admin", []string{"system:masters"}); err != nil {
		t.Fatal(err)
	}
	noConfig := filepath.Join(dir, "none.toml")
	lim := claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: zoneLabel, Max: 1}}}
	now := time.Now().UTC().Truncate(time.Millisecond)
	ago := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	hosts := map[string]*cluster.SimHost{}
	for _, s := range []struct {
		name, zone string
		c          claim.Claim
	}{
		{"node-a1", "zone-a", claim.Claim{State: claim.Holding, Since: *ago(25 * time.Minute), Updated: *ago(3 * time.Minute), Acquired: ago(3 * time.Minute),
			Limits: lim, Groups: map[string]string{zoneLabel: "zone-a"}, Phase: claim.PhaseDraining, Cordoned: true}},
		{"node-b1", "zone-b", claim.Claim{State: claim.Holding, Since: *ago(24 * time.Minute), Updated: *ago(70 * time.Second), Acquired: ago(70 * time.Second),
			Limits: lim, Groups: map[string]string{zoneLabel: "zone-b"}, Phase: claim.PhaseRebooting, Cordoned: true}},
		{"node-a2", "zone-a", claim.Claim{State: claim.Waiting, Since: *ago(20 * time.Minute), Updated: *ago(20 * time.Minute), Limits: lim}},
		{"node-c1", "zone-c", claim.Claim{State: claim.Waiting, Since: *ago(19 * time.Minute), Updated: *ago(19 * time.Minute), Limits: lim}},
		{"node-x1", "", claim.Claim{State: claim.Waiting, Since: *ago(5 * time.Minute), Updated: *ago(5 * time.Minute), Limits: lim}},
	} {
		labels := map[string]string{}
		if s.zone != "" {
			labels[zoneLabel] = s.zone
		}
		h, err := cp.AddHost(ctx, cluster.HostOptions{Name: s.name, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.RemoveHost(context.Background(), h) })
		hosts[s.name] = h
		if s.c.State == claim.Holding {
			s.c.BootID = h.BootID()
		}
		ann, err := s.c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		patchClaim(t, ctx, h, string(s.c.State), ann)
	}
	// A real daemon joins the queue behind them, in a full zone.
	conf := func(c *config.Config) {
		c.Lock.Concurrency = 3
		c.Lock.Groups = []config.GroupLimit{{Label: zoneLabel, Max: 1}}
	}
	d := startNode(t, ctx, nodeSpec{name: "node-b2", zone: "zone-b", config: conf})
	if err := d.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "node-b2 waiting", func() bool {
		st, _, _ := claimOf(t, ctx, "node-b2")
		return st == claim.Waiting
	})

	t.Run("an admin's kubeconfig", func(t *testing.T) {
		code, out, errs := runStatus(t, ctx, "--kubeconfig", admin, "--config", noConfig)
		t.Logf("kured-host status --kubeconfig admin.kubeconfig:\n%s", out)
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		lines := strings.Split(out, "\n")
		wantRows := []struct{ name, has string }{
			{"node-a1", "holding  draining"},
			{"node-b1", "holding  rebooting"},
			{"node-a2", "topology.kubernetes.io/zone=zone-a is full: 1 of 1 (node-a1)"},
			{"node-c1", "nothing: eligible, about to announce"},
			{"node-x1", "the cluster is full: 3 of 3 (node-a1, node-b1, node-c1)"},
			{"node-b2", "the cluster is full: 3 of 3 (node-a1, node-b1, node-c1)"},
		}
		if !strings.HasPrefix(lines[0], "NODE ") || len(lines) < len(wantRows)+1 {
			t.Fatalf("no table:\n%s", out)
		}
		for i, w := range wantRows {
			if row := lines[i+1]; !strings.HasPrefix(row, w.name+" ") || !strings.Contains(row, w.has) {
				t.Errorf("row %d: %q, want %s with %q", i+1, row, w.name, w.has)
			}
		}
		for _, want := range []string{
			"\nholding 2/3 · zone-a 1/1 · zone-b 1/1 · zone-c 0/1 · waiting 4 · alarms 0\n",
			"limits: concurrency 3 (published by node-a1, holding) · topology.kubernetes.io/zone 1 per value (published by node-a1, holding)\n",
			"! node-x1: no topology.kubernetes.io/zone label, so the limit per zone does not apply to it\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})

	t.Run("on a node", func(t *testing.T) {
		c := baseConfig()
		conf(&c)
		data, err := config.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		// The kubelet's kubeconfig is found under the host's root.
		code, out, errs := runStatus(t, ctx, "--host-root", hosts["node-a2"].Root, "--config", file)
		t.Logf("kured-host status on node-a2:\n%s", out)
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		for _, want := range []string{"limits: concurrency 3 (this configuration, " + file + ":", "this node: node-a2, waiting, place 1 in the queue\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})

	t.Run("json", func(t *testing.T) {
		code, out, errs := runStatus(t, ctx, "-o", "json", "--kubeconfig", admin, "--config", noConfig)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		var r status.Report
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.Schema != status.SchemaVersion || r.Summary != (status.Summary{Participants: 6, Active: 2, Holding: 2, Waiting: 4, Max: 3}) {
			t.Errorf("schema %d, summary %+v", r.Schema, r.Summary)
		}
		var names []string
		for _, n := range r.Nodes {
			names = append(names, n.Name)
		}
		if got := strings.Join(names, " "); got != "node-a1 node-b1 node-a2 node-c1 node-x1 node-b2" {
			t.Errorf("queue order %s", got)
		}
		b2 := r.Nodes[5]
		if b2.State != status.StateWaiting || b2.Queue != 4 || b2.Published == nil || b2.Published.Concurrency != 3 || !b2.Ready {
			t.Errorf("the daemon's own claim: %+v", b2)
		}
		if len(r.Unlabelled) != 1 || r.Unlabelled[0].Node != "node-x1" {
			t.Errorf("unlabelled %+v", r.Unlabelled)
		}
	})

	t.Run("an unreadable claim", func(t *testing.T) {
		bad, err := cp.AddHost(ctx, cluster.HostOptions{Name: "node-c2", Labels: map[string]string{zoneLabel: "zone-c"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.RemoveHost(context.Background(), bad) })
		patchClaim(t, ctx, bad, string(claim.Holding), `{"v":1,"limits":`)
		code, out, _ := runStatus(t, ctx, "--kubeconfig", admin, "--config", noConfig)
		t.Logf("with an unreadable claim:\n%s", out)
		for _, want := range []string{
			"\nnode-c2  zone-c  unreadable",
			"holding 3/1 (1 unreadable)",
			"! node-c2: claim cannot be read (unparsable claim: annotation: unexpected end of JSON input); it counts as holding a slot until it is fixed or removed\n",
		} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("exit %d; output lacks %q", code, want)
			}
		}
		// --watch redraws when the claim is removed, long before the interval.
		var buf syncBuffer
		cmd := exec.CommandContext(ctx, bin, "status", "--watch", "--interval", "1h", "--kubeconfig", admin, "--config", noConfig)
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the first snapshot", func() bool { return strings.Contains(buf.String(), "holding 3/1") })
		patchClaim(t, ctx, bad, "", "")
		waitFor(t, ctx, "a snapshot without the unreadable claim", func() bool {
			snaps := strings.Split(buf.String(), "\nkured-host status · ")
			return len(snaps) >= 2 && strings.Contains(snaps[len(snaps)-1], "holding 2/3 · zone-a 1/1 ·")
		})
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("--watch after SIGINT: %v\n%s", err, buf.String())
		}
		if !strings.HasPrefix(buf.String(), "kured-host status · ") || strings.Contains(buf.String(), "\x1b[") {
			t.Errorf("not a terminal: want plain snapshots with a header, got\n%s", buf.String())
		}
	})

	t.Run("no right to list Nodes", func(t *testing.T) {
		jane := filepath.Join(dir, "jane.kubeconfig")
		if err := cp.WriteKubeconfig(jane, "jane", nil); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runStatus(t, ctx, "--kubeconfig", jane, "--config", noConfig)
		t.Logf("as jane:\n%s", errs)
		if code != 1 || out != "" || !strings.Contains(errs, "kured-host: no read access to Nodes: jane may not get, list, watch Nodes, which status reads.") ||
			!strings.Contains(errs, "an admin's") || !strings.Contains(errs, "kured-host rbac | kubectl apply -f -") {
			t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out, errs)
		}
		// A node without kured-host's role may read only its own Node.
		withoutNodeReader(t, ctx, func() {
			code, _, errs := runStatus(t, ctx, "--kubeconfig", hosts["node-a2"].ClientKubeconfig, "--config", noConfig)
			t.Logf("on a node, without the role:\n%s", errs)
			if code != 1 || !strings.Contains(errs, "system:node:node-a2 may not get, list, watch Nodes") ||
				!strings.Contains(errs, "a node may read only its own Node") || !strings.Contains(errs, "\n  kured-host rbac | kubectl apply -f -\n") {
				t.Errorf("exit %d, stderr:\n%s", code, errs)
			}
		})
	})
}

// runStatus runs the binary's status command.
func runStatus(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errs bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"status"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errs.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, out.String(), errs.String()
}

// patchClaim writes a claim on h by hand with the node's own credentials
// ("" removes it).
func patchClaim(t *testing.T, ctx context.Context, h *cluster.SimHost, label, annotation string) {
	t.Helper()
	var l, a any
	if label != "" {
		l, a = label, annotation
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]any{claim.Label: l}, "annotations": map[string]any{claim.Annotation: a},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// withoutNodeReader runs f while kured-host's ClusterRoleBinding is gone.
func withoutNodeReader(t *testing.T, ctx context.Context, f func()) {
	t.Helper()
	rb := cp.Admin.RbacV1().ClusterRoleBindings()
	b, err := rb.Get(ctx, "kured-host-node-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rb.Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := rb.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, RoleRef: b.RoleRef, Subjects: b.Subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, cp.NodesCanListNodes); err != nil {
			t.Fatalf("binding restored but not in force: %v", err)
		}
	}()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := cp.NodesCanListNodes(ctx)
		return err == nil && !ok, nil
	}); err != nil {
		t.Fatalf("nodes may still list Nodes without the binding: %v", err)
	}
	f()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
