package cycletest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/test/cluster"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// workload puts, on each node, two replicated pods under a budget that
// allows one disruption at a time, a DaemonSet pod and a mirror pod.
func workload(t *testing.T, ctx context.Context, ns string, nodes []*node) {
	t.Helper()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	rs, err := cp.ReplicaSet(ctx, ns, "web", int32(2*len(nodes)), labels)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := cp.DaemonSetObject(ctx, ns, "agent", map[string]string{"app": "agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		for i := range 2 {
			name := fmt.Sprintf("web-%s-%d", n.h.Name, i)
			if _, err := cp.Pod(ctx, n.h, ns, name, cluster.Replicated, rs, labels); err != nil {
				t.Fatal(err)
			}
			if err := cp.WaitRunning(ctx, ns, name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cp.Pod(ctx, n.h, ns, "agent-"+n.h.Name, cluster.DaemonSet, ds, map[string]string{"app": "agent"}); err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Pod(ctx, n.h, ns, "static-"+n.h.Name, cluster.Mirror, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	cp.Recreate(ctx, rs, hostsOf(nodes))
	if _, err := cp.PDB(ctx, ns, "web", 2*len(nodes)-1, labels); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitPDB(ctx, ns, "web", 1); err != nil {
		t.Fatal(err)
	}
}

func hostsOf(nodes []*node) []*cluster.SimHost {
	hs := make([]*cluster.SimHost, len(nodes))
	for i, n := range nodes {
		hs[i] = n.h
	}
	return hs
}

// TestCycle: four hosts in two zones, concurrency 2, one per zone; one
// reboots through logind on its private bus, the others with the command
// method. Every host ends rebooted once, uncordoned, with no claim; the
// DaemonSet and mirror pods stay; the auditor finds nothing.
func TestCycle(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	limits := claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: zoneLabel, Max: 1}}}
	conf := func(c *config.Config) {
		c.Lock.Concurrency = 2
		c.Lock.Groups = []config.GroupLimit{{Label: zoneLabel, Max: 1}}
	}
	var nodes []*node
	for i := range 4 {
		nodes = append(nodes, startNode(t, ctx, nodeSpec{
			name: fmt.Sprintf("cycle-%d", i), zone: fmt.Sprintf("zone-%c", 'a'+i%2),
			config: conf, logind: i == 0, stop: 100 * time.Millisecond,
		}))
	}
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return strings.HasPrefix(n, "cycle-") }
	workload(t, ctx, "cycle", nodes)

	began := time.Now()
	for _, n := range nodes {
		if err := n.h.SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	waitDone(t, ctx, nodes...)
	t.Logf("4 nodes rebooted in %s", time.Since(began).Round(time.Millisecond))
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(limits); err != nil {
		t.Error(err)
	}
	if got := nodes[0].logind.Reboots(); len(got) != 1 || got[0] {
		t.Errorf("logind Reboot calls %v, want one, not interactive", got)
	}
	for _, n := range nodes {
		if st, _, unsched := claimOf(t, ctx, n.h.Name); st != "" || unsched || n.h.Boots() != 2 {
			t.Errorf("%s: claim %q, unschedulable %v, boots %d", n.h.Name, st, unsched, n.h.Boots())
		}
		for _, p := range []string{"agent-", "static-"} {
			if _, err := cp.Admin.CoreV1().Pods("cycle").Get(ctx, p+n.h.Name, metav1GetOptions()); err != nil {
				t.Errorf("%s%s was evicted: %v", p, n.h.Name, err)
			}
		}
		logs := n.logs()
		for _, want := range []string{"joined the queue", "took a reboot slot", "cordoned", "drained", "rebooting", "back after the reboot", "uncordoned", "slot released"} {
			if !strings.Contains(logs, want) {
				t.Errorf("%s: log lacks %q", n.h.Name, want)
			}
		}
	}
	// Sentinel to join: from creating the file to the waiting claim the
	// auditor sees (inotify, the blockers, one write).
	for _, n := range nodes {
		for _, st := range a.History() {
			if st.Node == n.h.Name && st.ClaimLabel != "" {
				t.Logf("%s: sentinel to claim seen by the auditor: %s", n.h.Name, st.Seen.Sub(began).Round(time.Millisecond))
				break
			}
		}
	}
	timeline(t, a, "cycle-1")
}

// TestSlowKubelet: a node without graceful node shutdown (its kubelet is
// killed and does not report NotReady) whose kubelet reports the new boot
// only 3 s after kured-host has started in it. The Node meanwhile still
// says Ready, with the old boot's ID. kured-host must keep the node
// cordoned and the slot held until the kubelet has reported the new boot
// (the auditor's CheckReleases: no release while the Node shows the boot
// the slot was taken in), and must not uncordon before either.
func TestSlowKubelet(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	limits := claim.Limits{Concurrency: 1}
	n := startNode(t, ctx, nodeSpec{name: "slow-kubelet", abrupt: true, kubeletDelay: 3 * time.Second})
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(name string) bool { return name == n.h.Name }
	oldBoot := n.h.BootID()
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, n)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(limits); err != nil {
		t.Error(err)
	}
	// While the Node showed the old boot after the reboot (the stale
	// Ready), it stayed cordoned.
	rebooted := false
	for _, s := range a.History() {
		if s.Claim.Phase == claim.PhaseRebooting {
			rebooted = true
		}
		if rebooted && s.BootID == oldBoot && !s.Unschedulable {
			t.Errorf("rv %d: uncordoned while the Node still showed the old boot %.8s", s.RV, oldBoot)
		}
	}
	if !strings.Contains(n.logs(), "the kubelet has not reported this boot yet") {
		t.Errorf("the log does not say why the slot was kept:\n%s", tail(n.logs(), 3000))
	}
	timeline(t, a, n.h.Name)
}

// timeline logs one host's cycle from the auditor's record.
func timeline(t *testing.T, a *cluster.Auditor, name string) {
	var start time.Time
	var last string
	for _, s := range a.History() {
		if s.Node != name {
			continue
		}
		ev := s.ClaimLabel + "/" + string(s.Claim.Phase)
		if s.ClaimLabel == "" {
			ev = "no claim"
		}
		ev += fmt.Sprintf(" unschedulable=%v ready=%v boot=%.8s", s.Unschedulable, s.Ready, s.BootID)
		if ev == last {
			continue
		}
		if start.IsZero() {
			start = s.Seen
		}
		t.Logf("%s +%6dms %s", name, s.Seen.Sub(start).Milliseconds(), ev)
		last = ev
	}
}
