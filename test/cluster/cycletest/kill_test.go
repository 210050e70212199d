package cycletest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
)

// slowProxy forwards TCP to target, holding each chunk from the client for
// delay, so that every request of a daemon behind it is slow and its short
// phases (entering) last long enough to be caught. Loopback only.
func slowProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(c, s) }()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestKillAnywhere kills the daemon (SIGKILL, then restarted, as systemd
// does) in each phase of one node's cycle: waiting, entering (at the
// blockers' last look), holding cordoned (the commit cordons) before the
// drain, draining, after the reboot before the
// uncordon, and during the release delay. The node must still reboot
// exactly once, be uncordoned and released; the auditor checks every
// revision.
func TestKillAnywhere(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	healthy := filepath.Join(t.TempDir(), "healthy")
	// A Prometheus that answers slowly keeps the node entering, at the
	// blockers' last look between its verify and its commit, a while.
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond)
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
	}))
	defer prom.Close()
	promURL, _ := url.Parse(prom.URL)

	helper := startNode(t, ctx, nodeSpec{name: "kill-helper", config: func(c *config.Config) {
		c.Drain.Delay = config.Duration(4 * time.Second)
	}})
	target := startNode(t, ctx, nodeSpec{name: "kill-target", stop: 2 * time.Second, config: func(c *config.Config) {
		c.Drain.Delay = config.Duration(1500 * time.Millisecond)
		c.Lock.ReleaseDelay = config.Duration(3 * time.Second)
		c.Health.Command = []string{"test", "-e", healthy}
		var u config.URL
		if err := u.UnmarshalText([]byte(promURL.String())); err != nil {
			t.Fatal(err)
		}
		c.Blockers.Prometheus.URL = u
		c.Blockers.Prometheus.Timeout = config.Duration(10 * time.Second)
	}})
	// The target talks to the API server through a slow proxy, so that
	// "entering" (announce, verify, commit) lasts long enough to be caught.
	server, _ := url.Parse(cp.Server)
	// Inside the host root, as the configured path is a host path.
	proxied := filepath.Join(target.h.Root, "etc/kubernetes/proxied.conf")
	kc, err := os.ReadFile(target.h.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc = []byte(strings.Replace(string(kc), cp.Server, "https://"+slowProxy(t, server.Host, 150*time.Millisecond), 1))
	if err := os.WriteFile(proxied, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	rewriteConfig(t, target, func(c *config.Config) { c.Kubernetes.Kubeconfig = "/etc/kubernetes/proxied.conf" })
	if err := target.h.RestartService("kured-host"); err != nil {
		t.Fatal(err)
	}

	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return strings.HasPrefix(n, "kill-") }
	workload(t, ctx, "kill", []*node{helper, target})

	// The helper takes the only slot first.
	if err := helper.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the helper to hold", func() bool { st, _, _ := claimOf(t, ctx, helper.h.Name); return st == claim.Holding })
	if err := target.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}

	kill := func(what string, at func(st claim.State, c claim.Claim) bool) {
		t.Helper()
		waitFor(t, ctx, "the target "+what, func() bool {
			st, c, _ := claimOf(t, ctx, target.h.Name)
			return at(st, c)
		})
		if err := target.h.RestartService("kured-host"); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed -9 while %s", what)
	}
	boot := target.h.BootID()
	kill("waiting", func(st claim.State, _ claim.Claim) bool { return st == claim.Waiting })
	kill("entering", func(st claim.State, _ claim.Claim) bool { return st == claim.Entering })
	kill("cordoned, before the drain", func(st claim.State, c claim.Claim) bool {
		return st == claim.Holding && c.Phase == claim.PhaseCordoned && target.h.BootID() == boot
	})
	kill("draining", func(st claim.State, c claim.Claim) bool { return st == claim.Holding && c.Phase == claim.PhaseDraining })
	kill("rebooted, before the uncordon", func(st claim.State, c claim.Claim) bool {
		return st == claim.Holding && c.Phase == claim.PhaseRebooted
	})
	if err := os.WriteFile(healthy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kill("in the release delay", func(st claim.State, c claim.Claim) bool {
		return st == claim.Holding && c.Phase == claim.PhaseReleasing
	})
	waitDone(t, ctx, target, helper)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(claim.Limits{Concurrency: 1}); err != nil {
		t.Error(err)
	}
	if b := target.h.Boots(); b != 2 {
		t.Errorf("target booted %d times, want 2 (one reboot)", b)
	}
	if st, _, unsched := claimOf(t, ctx, target.h.Name); st != "" || unsched {
		t.Errorf("target: claim %q, unschedulable %v", st, unsched)
	}
}

// rewriteConfig changes a node's configuration file.
func rewriteConfig(t *testing.T, n *node, change func(*config.Config)) {
	t.Helper()
	l, err := config.LoadFiles(n.config)
	if err != nil {
		t.Fatal(err)
	}
	change(&l.Config)
	data, err := config.Marshal(l.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.config, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
