// Package cycletest runs the real kured-host binary, one process per
// simulated host, against the real API server: the whole reboot cycle,
// with each host's own credentials, kubeconfig, host root and private
// D-Bus with a logind stand-in.
package cycletest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host/logindtest"
	"github.com/kured-host/kured-host/test/cluster"
)

var (
	cp  *cluster.ControlPlane
	bin string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kured-host-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if bin, err = cluster.BuildKuredHost(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts := cluster.Options{}
	if os.Getenv("CLUSTER_LOG") != "" {
		opts.Log = os.Stderr
	}
	cp, err = cluster.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cp.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

const zoneLabel = "topology.kubernetes.io/zone"

// node is a SimHost running the real kured-host.
type node struct {
	h      *cluster.SimHost
	k      *cluster.KuredHost
	bus    *logindtest.Bus
	logind *logindtest.Logind
	config string
}

type nodeSpec struct {
	name   string
	zone   string
	config func(*config.Config) // changes to the base configuration
	// logind reboots through the logind stand-in (else the command method).
	logind bool
	down   time.Duration
	stop   time.Duration // PodStopDelay
	// abrupt and kubeletDelay: see cluster.HostOptions' AbruptShutdown and
	// KubeletDelay.
	abrupt       bool
	kubeletDelay time.Duration
	// edit, if set, changes the configuration file as written.
	edit func([]byte) []byte
}

// baseConfig is every test node's configuration: the defaults with a short
// period, so that re-checks happen within a test, and debug logs.
func baseConfig() config.Config {
	c := config.Default()
	c.Sentinel.Period = config.Duration(2 * time.Second)
	c.Lock.WaitingGrace = config.Duration(10 * time.Second)
	c.Log.Level = "debug"
	return c
}

func startNode(t *testing.T, ctx context.Context, s nodeSpec) *node {
	t.Helper()
	labels := map[string]string{}
	if s.zone != "" {
		labels[zoneLabel] = s.zone
	}
	if s.down == 0 {
		s.down = 300 * time.Millisecond
	}
	h, err := cp.AddHost(ctx, cluster.HostOptions{Name: s.name, Labels: labels, DownTime: s.down, PodStopDelay: s.stop,
		AbruptShutdown: s.abrupt, KubeletDelay: s.kubeletDelay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.RemoveHost(context.Background(), h) })
	n := &node{h: h}
	if n.bus, err = logindtest.StartBus(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.bus.Stop)
	// logind reboots the host when asked, as the real one would.
	if n.logind, err = logindtest.Serve(n.bus.Address, func() {
		cmd := h.RebootCommand()
		_ = exec.Command(cmd[0], cmd[1:]...).Run()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.logind.Close() })

	c := baseConfig()
	if !s.logind {
		c.Reboot.Method, c.Reboot.Command = config.RebootCommand, h.RebootCommand()
	}
	if s.config != nil {
		s.config(&c)
	}
	data, err := config.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if s.edit != nil {
		data = s.edit(data)
	}
	n.k, err = h.RunKuredHostTOML(bin, data, n.env()...)
	if err != nil {
		t.Fatal(err)
	}
	n.config = n.k.Config
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CYCLE_LOGS") != "" {
			t.Logf("--- kured-host on %s:\n%s", s.name, tail(n.logs(), 6000))
		}
	})
	return n
}

// env is the daemon's environment: its private system bus, and more
// (NOTIFY_SOCKET, WATCHDOG_USEC) for the next start.
func (n *node) env(more ...string) []string {
	return append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + n.bus.Address}, more...)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (n *node) logs() string { return n.k.Logs() }

// claimOf reads a node's claim as the admin sees it.
func claimOf(t *testing.T, ctx context.Context, node string) (claim.State, claim.Claim, bool) {
	t.Helper()
	return cp.ClaimOf(t, ctx, node)
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	cluster.WaitFor(t, ctx, what, 20*time.Millisecond, cond)
}

// waitDone waits until each node has booted twice and has no claim left.
func waitDone(t *testing.T, ctx context.Context, nodes ...*node) {
	t.Helper()
	for _, n := range nodes {
		waitFor(t, ctx, n.h.Name+" rebooted and released", func() bool {
			st, _, _ := claimOf(t, ctx, n.h.Name)
			return n.h.Boots() >= 2 && st == ""
		})
	}
}

func metav1GetOptions() metav1.GetOptions { return metav1.GetOptions{} }
