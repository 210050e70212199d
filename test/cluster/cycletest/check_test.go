package cycletest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host/logindtest"
	"github.com/kured-host/kured-host/test/cluster"
)

// TestCheck runs `kured-host check` for a SimHost (its host root, its
// kubelet kubeconfig, a private bus with the logind stand-in): every check
// passes with the RBAC manifest applied; kubernetes.node_name is checked
// against the credentials; and without the manifest the permissions check
// fails, shows the manifest and the exit status is 1.
func TestCheck(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	h, err := cp.AddHost(ctx, cluster.HostOptions{Name: "check-1", Labels: map[string]string{zoneLabel: "zone-a"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.RemoveHost(context.Background(), h) })
	bus, err := logindtest.StartBus(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Stop)
	stand, err := logindtest.Serve(bus.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stand.Close() })
	// A pod on the node, so that getting one by name is asked too; the
	// Node authorizer learns of it asynchronously.
	if err := cp.EnsureNamespace(ctx, "check"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Pod(ctx, h, "check", "static-check-1", cluster.Mirror, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := h.Client.CoreV1().Pods("check").Get(ctx, "static-check-1", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the node cannot read its own pod: %v", err)
	}

	metrics := freeAddress(t)
	check := func(t *testing.T, change func(*config.Config)) (int, string, string) {
		t.Helper()
		c := config.Default()
		c.Metrics.Address = metrics
		if change != nil {
			change(&c)
		}
		return runCheck(t, c, "--host-root", h.Root, "--system-bus", bus.Address)
	}

	t.Run("all ok", func(t *testing.T) {
		code, out, errs := check(t, nil)
		t.Logf("kured-host check:\n%s", out)
		if code != 0 || errs != "" {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
		for _, want := range []string{
			"ok   kubeconfig: " + h.Kubeconfig + " (known path), server https://",
			"ok   identity: system:node:check-1: node check-1\n",
			"ok   node: check-1 is Ready; topology.kubernetes.io/zone=zone-a\n",
			"ok   permissions: get, list, watch nodes (to read every node's claim)\n",
			"ok   permissions: patch nodes check-1 (",
			"ok   permissions: list pods with spec.nodeName=check-1 (",
			"ok   permissions: create pods/eviction (",
			"ok   permissions: create events in default (",
			"ok   permissions: get pods check/static-check-1 (",
			"ok   clock: this host",
			"ok   sentinel: sentinel.file " + filepath.Join(h.Root, cluster.SentinelPath) + ": ",
			"ok   boot ID: " + h.BootID(),
			"ok   window: reboots may start at any time (no window set)\n",
			"ok   logind: org.freedesktop.login1 is on the system bus; CanReboot: yes; no inhibitor blocks a shutdown now\n",
			"ok   metrics: metrics.address " + metrics + " can be listened on\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(line, "ok   ") {
				t.Errorf("not ok: %s", line)
			}
		}
	})

	t.Run("node_name", func(t *testing.T) {
		code, out, _ := check(t, func(c *config.Config) { c.Kubernetes.NodeName = "check-1" })
		if code != 0 || !strings.Contains(out, "ok   identity: system:node:check-1: node check-1, as kubernetes.node_name says\n") {
			t.Errorf("node_name = own name: exit %d\n%s", code, out)
		}
		code, out, errs := check(t, func(c *config.Config) { c.Kubernetes.NodeName = "check-2" })
		if code != 1 || !strings.Contains(out, `fail identity: system:node:check-1, but kubernetes.node_name is "check-2"`) ||
			!strings.Contains(out, "fail node: there is no Node check-2") || !strings.Contains(errs, "checks failed") {
			t.Errorf("node_name = another name: exit %d, stderr %q\n%s", code, errs, out)
		}
	})

	// Without the manifest the node may read only its own Node.
	t.Run("without the RBAC manifest", func(t *testing.T) {
		binding, err := cp.Admin.RbacV1().ClusterRoleBindings().Get(ctx, "kured-host-node-reader", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cp.Admin.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		defer restoreBinding(t, ctx, binding)
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			ok, err := cp.NodesCanListNodes(ctx)
			return err == nil && !ok, nil
		}); err != nil {
			t.Fatalf("nodes may still list Nodes without the binding: %v", err)
		}
		code, out, errs := check(t, nil)
		t.Logf("kured-host check without the manifest:\n%s", out)
		if code != 1 || errs != "kured-host: 1 of 19 checks failed\n" {
			t.Errorf("exit %d, stderr %q; want 1 and one failure", code, errs)
		}
		for _, want := range []string{
			"fail permissions: may not get, list, watch nodes, which it needs to read every node's claim (",
			"Since Kubernetes 1.32 a node may read only its own Node unless a role allows more\n",
			"     Apply this once per cluster (kured-host rbac | kubectl apply -f -):\n",
			"     kind: ClusterRoleBinding\n",
			"ok   permissions: patch nodes check-1 (",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})
}

// runCheck runs `kured-host check` with configuration c and returns the
// exit status, stdout and stderr.
func runCheck(t *testing.T, c config.Config, args ...string) (int, string, string) {
	t.Helper()
	body, err := config.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"check", "--config", path}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func restoreBinding(t *testing.T, ctx context.Context, b *rbacv1.ClusterRoleBinding) {
	t.Helper()
	b = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, RoleRef: b.RoleRef, Subjects: b.Subjects}
	if _, err := cp.Admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, cp.NodesCanListNodes); err != nil {
		t.Fatalf("binding restored but not in force: %v", err)
	}
}
