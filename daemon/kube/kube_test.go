package kube

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/host"
)

func TestKubeletKubeconfig(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf"}, "/etc/kubernetes/kubelet.conf"},
		{[]string{"kubelet", "--kubeconfig", "/var/lib/kubelet/kubeconfig", "--v=2"}, "/var/lib/kubelet/kubeconfig"},
		{[]string{"/usr/bin/kubelet", "--v=2"}, ""},
		{[]string{"/usr/bin/kubelet", "--kubeconfig"}, ""},
		{[]string{"/usr/bin/containerd", "--kubeconfig=/x"}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := KubeletKubeconfig(tt.argv); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func write(t *testing.T, root, p, body string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFind(t *testing.T) {
	t.Run("configured", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "/srv/kc", "x")
		p, how, err := Find(host.Root(root), "/srv/kc")
		if err != nil || p != filepath.Join(root, "/srv/kc") || !strings.Contains(how, "configured") {
			t.Errorf("%s %s %v", p, how, err)
		}
		if _, _, err := Find(host.Root(root), "/srv/missing"); err == nil {
			t.Error("a missing configured kubeconfig is not an error")
		}
	})
	t.Run("the running kubelet's argument wins over known paths", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "/etc/kubernetes/kubelet.conf", "x")
		write(t, root, "/opt/kubelet/kc", "x")
		write(t, root, "/proc/4242/cmdline", "/usr/bin/kubelet\x00--kubeconfig=/opt/kubelet/kc\x00--v=2\x00")
		write(t, root, "/proc/1/cmdline", "/sbin/init\x00")
		write(t, root, "/proc/self/cmdline", "")
		p, how, err := Find(host.Root(root), "")
		if err != nil || p != filepath.Join(root, "/opt/kubelet/kc") || !strings.Contains(how, "pid 4242") {
			t.Errorf("%s %s %v", p, how, err)
		}
	})
	t.Run("known paths in order", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "/var/lib/rancher/k3s/agent/kubelet.kubeconfig", "x")
		write(t, root, "/var/lib/k0s/kubelet.conf", "x")
		p, _, err := Find(host.Root(root), "")
		if err != nil || p != filepath.Join(root, "/var/lib/rancher/k3s/agent/kubelet.kubeconfig") {
			t.Errorf("%s %v", p, err)
		}
	})
	t.Run("none", func(t *testing.T) {
		_, _, err := Find(host.Root(t.TempDir()), "")
		if !errors.Is(err, ErrNoKubeconfig) || !strings.Contains(err.Error(), "set kubernetes.kubeconfig") {
			t.Errorf("got %v", err)
		}
	})
}

func TestServerClock(t *testing.T) {
	server := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", server.Format(http.TimeFormat))
	}))
	defer srv.Close()
	local := server.Add(-90 * time.Second) // this host is 90 s behind
	c := NewServerClock()
	c.now = func() time.Time { return local }
	if _, seen := c.Offset(); seen {
		t.Fatal("offset before any reply")
	}
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	off, seen := c.Offset()
	if !seen || off < 90*time.Second || off > 91*time.Second {
		t.Errorf("offset %s, want about 90.5 s", off)
	}
	if got := c.Now().Sub(server); got < 0 || got > time.Second {
		t.Errorf("server now off by %s", got)
	}
}

// TestServerClockNarrows: replies at different points of the server's
// second narrow the estimate well below Date's one-second resolution, and
// a clock step on this host starts the estimate over.
func TestServerClockNarrows(t *testing.T) {
	for _, tc := range []struct {
		name string
		true time.Duration
	}{
		{"host behind", 90*time.Second + 300*time.Millisecond},
		{"host ahead", -(42*time.Second + 870*time.Millisecond)},
		{"in step", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewServerClock()
			local := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			rtt := 2 * time.Millisecond
			reply := func() {
				sent := local
				stamped := sent.Add(rtt / 2).Add(tc.true).Truncate(time.Second)
				local = local.Add(rtt)
				c.observe(sent, local, stamped)
			}
			for range 40 {
				reply()
				local = local.Add(137 * time.Millisecond) // replies fall at varied phases
			}
			if off, _ := c.Offset(); (off - tc.true).Abs() > 20*time.Millisecond {
				t.Errorf("offset %s after 40 replies, want within 20ms of %s", off, tc.true)
			}
			// This host's clock is set back by a minute: the estimate
			// follows at once.
			local = local.Add(-time.Minute)
			tc.true += time.Minute
			reply()
			if off, _ := c.Offset(); (off - tc.true).Abs() > time.Second {
				t.Errorf("offset %s after the step, want within a second of %s", off, tc.true)
			}
		})
	}
}
