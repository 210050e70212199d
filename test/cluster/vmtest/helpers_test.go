package vmtest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/test/cluster"
)

// scenario skips unless enabled, and returns the scenario's context: d
// with KVM, three times d with TCG (emulation). It logs the wall time.
func scenario(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	skipUnlessEnabled(t)
	if env.accel != "kvm" {
		d *= 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	began := time.Now()
	t.Cleanup(func() {
		cancel()
		t.Logf("%s: wall time %s (timeout %s)", t.Name(), time.Since(began).Round(100*time.Millisecond), d)
	})
	return ctx
}

// install installs the package under test with apt, as a user would,
// and returns apt's output.
func install(ctx context.Context, v *VM) string {
	return v.Must(ctx, "apt-get install -y /mnt/share/debs/kured-host_*_amd64.deb")
}

// dropIn writes a configuration drop-in in /etc/kured-host/config.d.
func dropIn(ctx context.Context, v *VM, name, toml string) {
	v.Must(ctx, fmt.Sprintf("mkdir -p /etc/kured-host/config.d && cat >/etc/kured-host/config.d/%s <<'EOF'\n%sEOF", name, toml))
}

// fastRecheck is the tests' drop-in: blockers looked at again every 5
// seconds (kured-host rechecks every sentinel.period, at most a minute).
const fastRecheck = "[sentinel]\nperiod = \"5s\"\n"

// enable runs `systemctl enable --now kured-host` and waits until the
// daemon says it is idle.
func enable(ctx context.Context, v *VM) {
	v.Must(ctx, "systemctl enable --now kured-host")
	waitStatus(ctx, v, "idle: no reboot needed")
}

// statusText is the daemon's STATUS= line, as systemd has it.
func statusText(ctx context.Context, v *VM) string {
	return strings.TrimSpace(v.Must(ctx, "systemctl show -p StatusText --value kured-host"))
}

// waitStatus waits until the daemon's STATUS= line starts with prefix, or
// with one of or, and returns that line.
func waitStatus(ctx context.Context, v *VM, prefix string, or ...string) string {
	v.t.Helper()
	var last string
	prefixes := append([]string{prefix}, or...)
	v.waitFor(ctx, fmt.Sprintf("kured-host's status %q", prefixes), func() bool {
		res, err := v.Poll(ctx, "systemctl show -p StatusText --value kured-host")
		if err != nil {
			return false
		}
		last = strings.TrimSpace(res.Output)
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(last, p) })
	})
	return last
}

// inQueue are the other statuses of a node in the queue: the status says
// "waiting" as the join lands, but a node whose turn comes at once shows
// it only for a moment, which a poll can miss and then see the slot held
// (a CI run of TestRealKubelet once waited an hour for a "waiting" it had
// missed).
var inQueue = []string{"reboot needed: joining the queue", "holding a reboot slot"}

// mainPID is the daemon's process ID, as systemd has it.
func mainPID(ctx context.Context, v *VM) string {
	return strings.TrimSpace(v.Must(ctx, "systemctl show -p MainPID --value kured-host"))
}

// claimOf reads a node's claim as the admin sees it.
func claimOf(t *testing.T, ctx context.Context, node string) (claim.State, claim.Claim, bool) {
	t.Helper()
	return env.cp.ClaimOf(t, ctx, node)
}

// waitFor polls cond every 250ms until it holds.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	cluster.WaitFor(t, ctx, what, 250*time.Millisecond, cond)
}

// podOn puts one replicated pod on node (a ReplicaSet's, so a drain
// evicts it) and waits until the node's kubelet reports it Running.
func podOn(t *testing.T, ctx context.Context, ns, name, node string) *corev1.Pod {
	t.Helper()
	p := createReplicaPod(t, ctx, ns, name, node, nil)
	if err := env.cp.WaitRunning(ctx, ns, name); err != nil {
		t.Fatalf("pod %s/%s on %s: %v", ns, name, node, err)
	}
	return p
}

func replicaPod(rs *appsv1.ReplicaSet, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rs.Namespace, Labels: rs.Spec.Selector.MatchLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
}

// peer is a simulated node of the harness running the real kured-host
// (the same build as the package), rebooting with the command method.
type peer struct {
	h *cluster.SimHost
	k *cluster.KuredHost
}

func startPeer(t *testing.T, ctx context.Context, name string) *peer {
	t.Helper()
	h, err := env.cp.AddHost(ctx, cluster.HostOptions{Name: name, DownTime: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.cp.RemoveHost(context.Background(), h) })
	c := config.Default()
	c.Sentinel.Period = config.Duration(2 * time.Second)
	c.Reboot.Method, c.Reboot.Command = config.RebootCommand, h.RebootCommand()
	c.Blockers.Inhibitors = false // a simulated host has no logind
	k, err := h.RunKuredHost(env.bin, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("VM_LOGS") != "" {
			t.Logf("--- kured-host on %s:\n%s", name, tail(k.Logs(), 4000))
		}
	})
	return &peer{h: h, k: k}
}

// heldInOrder reports the nodes in the order they first held a slot
// (from the auditor's record), and whether waiter waited (a waiting
// claim) while one of the others held a slot.
func heldInOrder(a *cluster.Auditor, waiter string) (order []string, waited bool) {
	cur := map[string]cluster.NodeState{}
	seen := map[string]bool{}
	for _, s := range a.History() {
		cur[s.Node] = s
		if s.Holding() && !seen[s.Node] {
			seen[s.Node] = true
			order = append(order, s.Node)
		}
		if w := cur[waiter]; claim.State(w.ClaimLabel) == claim.Waiting {
			for n, o := range cur {
				if n != waiter && o.Holding() {
					waited = true
				}
			}
		}
	}
	return order, waited
}

// limits are the default configuration's: one node at a time, one per
// zone.
var limits = claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: "topology.kubernetes.io/zone", Max: 1}}}

// auditNodes starts the auditor, its checks limited to nodes; it stops
// when the test ends.
func auditNodes(t *testing.T, ctx context.Context, nodes ...string) *cluster.Auditor {
	t.Helper()
	a, err := env.cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	scope := map[string]bool{}
	for _, n := range nodes {
		scope[n] = true
	}
	a.Scope = func(n string) bool { return scope[n] }
	return a
}

// peersTakeTheSlot makes each peer need a reboot and waits until one of
// them holds a slot.
func peersTakeTheSlot(t *testing.T, ctx context.Context, peers []*peer) {
	t.Helper()
	for _, p := range peers {
		if err := p.h.SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "a peer holding a slot", func() bool {
		for _, p := range peers {
			if st, _, _ := claimOf(t, ctx, p.h.Name); st == claim.Holding {
				return true
			}
		}
		return false
	})
}

// waitPeersDone waits until each peer has rebooted and released its slot.
func waitPeersDone(t *testing.T, ctx context.Context, peers []*peer) {
	t.Helper()
	for _, p := range peers {
		waitFor(t, ctx, p.h.Name+" rebooted and released", func() bool {
			st, _, _ := claimOf(t, ctx, p.h.Name)
			return p.h.Boots() >= 2 && st == ""
		})
	}
}

// createReplicaPod creates one replicated pod on node (a ReplicaSet's, so
// a drain evicts it), edited by edit, without waiting for it to run.
func createReplicaPod(t *testing.T, ctx context.Context, ns, name, node string, edit func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	cp := env.cp
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	rs, err := cp.ReplicaSet(ctx, ns, name, 1, map[string]string{"app": name})
	if err != nil {
		t.Fatal(err)
	}
	p := replicaPod(rs, name, node)
	if edit != nil {
		edit(p)
	}
	p, err = cp.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitRolled waits until the VM has rebooted, come back in a new boot and
// released its slot uncordoned, and until the peers are done; it logs
// when each came (from began, the sentinels) and checks the auditor's
// record against the limits. It returns the VM's new boot ID.
func waitRolled(t *testing.T, ctx context.Context, v *VM, a *cluster.Auditor, peers []*peer, oldBoot string, began time.Time) string {
	t.Helper()
	v.waitFor(ctx, "the VM to reboot", func() bool { return v.Boots() >= 2 })
	rebootAt := time.Since(began)
	newBoot := v.WaitUp(ctx, oldBoot)
	upAt := time.Since(began)
	waitFor(t, ctx, "the VM's slot released", func() bool {
		st, _, unsched := claimOf(t, ctx, v.Name)
		return st == "" && !unsched
	})
	releasedAt := time.Since(began)
	waitPeersDone(t, ctx, peers)
	t.Logf("from the sentinels: VM rebooting %s, VM back %s, VM's slot released %s, all done %s",
		rebootAt.Round(100*time.Millisecond), upAt.Round(100*time.Millisecond), releasedAt.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(limits); err != nil {
		t.Error(err)
	}
	return newBoot
}
