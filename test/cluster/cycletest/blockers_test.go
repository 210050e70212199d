package cycletest

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host/logindtest"
	"github.com/kured-host/kured-host/test/cluster"
)

// stays asserts that the node neither joins the queue nor reboots for d.
func stays(t *testing.T, ctx context.Context, n *node, d time.Duration, why string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if st, _, _ := claimOf(t, ctx, n.h.Name); st != "" || n.h.Boots() != 1 {
			t.Fatalf("%s: joined (%q) or rebooted while %s", n.h.Name, st, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBlockers: a logind inhibitor in block mode (a package manager at
// work) and a pod matching a blocking selector each keep the node out of
// the queue, with the reason in the log; once they go, it reboots.
func TestBlockers(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	n := startNode(t, ctx, nodeSpec{name: "block-1", config: func(c *config.Config) {
		var s config.Selector
		if err := s.UnmarshalText([]byte("app=etcd-backup")); err != nil {
			t.Fatal(err)
		}
		c.Blockers.PodSelectors = []config.Selector{s}
	}})
	if err := cp.EnsureNamespace(ctx, "block"); err != nil {
		t.Fatal(err)
	}
	n.logind.SetInhibitors([]logindtest.Inhibitor{{What: "shutdown:sleep", Who: "apt", Why: "Installing packages", Mode: "block", PID: 4242}})
	backup, err := cp.Pod(ctx, n.h, "block", "backup", cluster.Bare, nil, map[string]string{"app": "etcd-backup"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	stays(t, ctx, n, 3*time.Second, "apt held an inhibitor and a backup pod ran")
	logs := n.logs()
	for _, want := range []string{"shutdown is inhibited by apt (pid 4242): Installing packages", "blocking pods on this node: block/backup (app=etcd-backup)"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	expectEvent(t, ctx, n.h.Name, "Blocked", "shutdown is inhibited by apt")
	n.logind.SetInhibitors(nil)
	stays(t, ctx, n, 3*time.Second, "the backup pod still ran")
	if err := cp.Admin.CoreV1().Pods("block").Delete(ctx, backup.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, n)
}

// TestDrainTimeout: a budget that never allows an eviction makes the drain
// time out; the node is uncordoned, the slot recorded as aborted and
// released, and another node may go meanwhile. When the budget goes, the
// node reboots on a later try.
func TestDrainTimeout(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	stuck := startNode(t, ctx, nodeSpec{name: "pdb-stuck", config: func(c *config.Config) {
		c.Drain.Timeout = config.Duration(2 * time.Second)
	}})
	other := startNode(t, ctx, nodeSpec{name: "pdb-other"})
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return strings.HasPrefix(n, "pdb-") }
	if err := cp.EnsureNamespace(ctx, "pdb"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "quorum"}
	rs, err := cp.ReplicaSet(ctx, "pdb", "quorum", 1, labels)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Pod(ctx, stuck.h, "pdb", "quorum-0", cluster.Replicated, rs, labels); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitRunning(ctx, "pdb", "quorum-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.PDB(ctx, "pdb", "quorum", 1, labels); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitPDB(ctx, "pdb", "quorum", 0); err != nil {
		t.Fatal(err)
	}
	if err := stuck.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the drain to give up", func() bool {
		return strings.Contains(stuck.logs(), "drain failed; uncordoning and giving the slot back")
	})
	expectEvent(t, ctx, stuck.h.Name, "DrainFailed", "not done after drain.timeout (2s)")
	// The other node takes the slot the stuck one gave back.
	if err := other.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, other)
	if stuck.h.Boots() != 1 {
		t.Fatal("the stuck node rebooted though its drain never finished")
	}
	if err := cp.Admin.PolicyV1().PodDisruptionBudgets("pdb").Delete(ctx, "quorum", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, stuck)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(claim.Limits{Concurrency: 1}); err != nil {
		t.Error(err)
	}
	aborted := 0
	for _, s := range a.History() {
		if s.Node == "pdb-stuck" && s.Claim.Phase == claim.PhaseAborted {
			aborted++
		}
	}
	if aborted == 0 {
		t.Error("no aborted claim recorded before giving the slot back")
	}
}

// TestSystemdNotify: the daemon tells systemd it is ready once watching,
// and its state in STATUS lines, each as it changes.
func TestSystemdNotify(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	n := startNode(t, ctx, nodeSpec{name: "notify-1"})
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n.k.SetEnv(n.env("NOTIFY_SOCKET=" + sock)...)
	if err := n.h.RestartService("kured-host"); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:k])
		}
	}()
	expect := func(want string) {
		t.Helper()
		for {
			select {
			case m := <-msgs:
				if strings.HasPrefix(m, "STATUS=") {
					t.Logf("systemctl status would show: Status: %q", strings.TrimPrefix(m, "STATUS="))
				}
				if strings.Contains(m, want) {
					t.Logf("sd_notify: %q", m)
					return
				}
			case <-ctx.Done():
				t.Fatalf("no sd_notify message with %q", want)
			}
		}
	}
	expect("READY=1")
	expect("STATUS=idle: no reboot needed")
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	// Shown as the join lands, not at the cycle's next tick: alone in
	// the queue, the node takes its slot before that tick.
	expect("STATUS=waiting for a reboot slot")
	expect("STATUS=holding a reboot slot: draining")
	waitDone(t, ctx, n)
	// SIGTERM: a clean stop.
	if err := n.h.Process("kured-host").Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("STOPPING=1")
}

// TestWatchdog: with WatchdogSec set (WATCHDOG_USEC, WATCHDOG_PID), the
// daemon pings at half the interval.
func TestWatchdog(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	n := startNode(t, ctx, nodeSpec{name: "watchdog-1"})
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n.k.SetEnv(n.env("NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=1000000")...)
	if err := n.h.RestartService("kured-host"); err != nil {
		t.Fatal(err)
	}
	pings := 0
	buf := make([]byte, 4096)
	deadline := time.Now().Add(5 * time.Second)
	_ = conn.SetReadDeadline(deadline)
	for time.Now().Before(deadline) && pings < 3 {
		k, err := conn.Read(buf)
		if err != nil {
			break
		}
		if string(buf[:k]) == "WATCHDOG=1" {
			pings++
		}
	}
	if pings < 3 {
		t.Errorf("%d WATCHDOG=1 pings in 5 s with a 1 s watchdog, want several", pings)
	}
}

// expectEvent waits for an Event with reason on node whose message says
// something.
func expectEvent(t *testing.T, ctx context.Context, node, reason, says string) {
	t.Helper()
	waitFor(t, ctx, reason+" event on "+node, func() bool {
		list, err := cp.Admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == reason && strings.Contains(e.Message, says) && e.Source.Component == "kured-host" {
				return true
			}
		}
		return false
	})
}
