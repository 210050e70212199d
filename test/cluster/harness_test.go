package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// One control plane serves every test of the package.
var cp *ControlPlane

func TestMain(m *testing.M) {
	if served, err := ServeControlPlane(); served { // TestOwnProcess's control plane
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var logw *os.File
	if os.Getenv("CLUSTER_LOG") != "" {
		logw = os.Stderr
	}
	var err error
	opts := Options{AuditLog: true}
	if logw != nil {
		opts.Log = logw
	}
	cp, err = Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("control plane started in %s\n", cp.StartTime.Round(time.Millisecond))
	code := m.Run()
	cp.Stop()
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var hostSeq atomic.Int64

// newHost adds a host with a name unique in the package.
func newHost(t *testing.T, ctx context.Context, o HostOptions) *SimHost {
	t.Helper()
	if o.Name == "" {
		o.Name = fmt.Sprintf("node-%d", hostSeq.Add(1))
	}
	if o.DownTime == 0 {
		o.DownTime = 200 * time.Millisecond
	}
	h, err := cp.AddHost(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.RemoveHost(context.Background(), h) })
	return h
}

func getNode(t *testing.T, ctx context.Context, name string) *corev1.Node {
	t.Helper()
	n, err := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestControlPlane(t *testing.T) {
	ctx := testCtx(t)
	if _, err := cp.Admin.CoreV1().Namespaces().Get(ctx, "kube-node-lease", metav1.GetOptions{}); err != nil {
		t.Fatalf("admin client: %v", err)
	}
	// kured-host's own manifest is applied: the role exists and is bound.
	if _, err := cp.Admin.RbacV1().ClusterRoleBindings().Get(ctx, "kured-host-node-reader", metav1.GetOptions{}); err != nil {
		t.Fatalf("RBAC manifest not applied: %v", err)
	}
	t.Logf("control plane start: %s", cp.StartTime)
}

func TestSimHostRegistration(t *testing.T) {
	ctx := testCtx(t)
	h := newHost(t, ctx, HostOptions{Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a"}})
	n := getNode(t, ctx, h.Name)
	if !NodeReady(n) {
		t.Errorf("node not Ready: %+v", n.Status.Conditions)
	}
	if got := n.Labels["topology.kubernetes.io/zone"]; got != "zone-a" {
		t.Errorf("zone label %q", got)
	}
	if n.Status.NodeInfo.BootID != h.BootID() || h.BootID() == "" {
		t.Errorf("boot ID %q in the Node, %q on the host", n.Status.NodeInfo.BootID, h.BootID())
	}
	data, err := os.ReadFile(filepath.Join(h.Root, BootIDPath))
	if err != nil || strings.TrimSpace(string(data)) != h.BootID() {
		t.Errorf("boot_id file %q, %v", data, err)
	}

	// The kubeconfig is kubeadm-shaped and carries the node's identity.
	cfg, err := h.LoadKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Status.UserInfo; u.Username != "system:node:"+h.Name || !contains(u.Groups, "system:nodes") {
		t.Errorf("identity %q %v", u.Username, u.Groups)
	}
	// A rotated certificate (new file, symlink swapped) is what a client
	// built from the kubeconfig now presents, and it is accepted.
	before, err := os.ReadFile(filepath.Join(h.Root, CurrentCert))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.RotateCert(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(h.Root, CurrentCert))
	if err != nil || string(after) == string(before) {
		t.Fatalf("certificate not rotated: %v", err)
	}
	cfg2, err := h.LoadKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	client2, err := kubernetes.NewForConfig(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client2.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("rotated certificate refused: %v", err)
	}

	// The not-ready taint the lifecycle stand-in manages is gone once Ready.
	waitFor(t, ctx, "no not-ready taint", func() bool {
		for _, tn := range getNode(t, ctx, h.Name).Spec.Taints {
			if tn.Key == NotReadyTaint {
				return false
			}
		}
		return true
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestReboot: NotReady, down, a new boot ID, the sentinel gone, Ready again,
// and what ran on the host started again; asked for through RebootCommand
// as kured-host's command method would.
// TestLeaseRenewal: the kubelet stand-in renews its Lease as the kubelet's
// lease controller does, with one Update from the Lease it last wrote, and
// reads it afresh only when that Update conflicts; the heartbeat figures
// of the benchmarks time these renewals.
func TestLeaseRenewal(t *testing.T) {
	ctx := testCtx(t)
	h := newHost(t, ctx, HostOptions{})
	h.halt() // the stand-in's own renewals would interleave with the test's
	log, err := cp.AuditLog()
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{h: h}
	leaseCalls := func() map[string]int {
		t.Helper()
		rs, err := log.Requests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rs.Where(func(r Request) bool { return r.User == "system:node:"+h.Name && r.Resource == "leases" }).Count(Verb)
	}
	first, err := k.renewLease(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaseCalls()
	for _, tc := range []struct {
		name  string
		write func(last *coordinationv1.Lease) // someone else's, between the renewals
		want  map[string]int
	}{
		{"from the last", func(*coordinationv1.Lease) {}, map[string]int{"update": 1}},
		{"after another writer", func(last *coordinationv1.Lease) {
			other := last.DeepCopy()
			other.Spec.HolderIdentity = ptr.To("someone-else")
			if _, err := cp.Admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, other, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, map[string]int{"update": 2, "get": 1}},
	} {
		tc.write(first)
		leaseCalls()
		got, err := k.renewLease(ctx, first)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if calls := leaseCalls(); !maps.Equal(calls, tc.want) {
			t.Errorf("%s: lease requests %v, want %v", tc.name, calls, tc.want)
		}
		stored, err := cp.Admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != stored.ResourceVersion || !got.Spec.RenewTime.After(first.Spec.RenewTime.Time) {
			t.Errorf("%s: renewal returned version %s renewed at %s; stored %s; the last renewal was at %s",
				tc.name, got.ResourceVersion, got.Spec.RenewTime, stored.ResourceVersion, first.Spec.RenewTime)
		}
		first = got
	}
}

// TestOwnProcess: a control plane in a process of its own serves the
// hosts of this one as one in this process does (a host registers with its
// own identity and is Ready; the audit log has its requests); its API
// server's metrics and its process's CPU time are read from here, as from
// the control plane in this process; and Stop ends the process.
func TestOwnProcess(t *testing.T) {
	ctx := testCtx(t)
	const apfWait = "apiserver_flowcontrol_request_wait_duration_seconds"
	began := time.Now()
	other, err := Start(Options{OwnProcess: true, AuditLog: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := other.Pid
	stopped := false
	defer func() {
		if !stopped {
			other.Stop()
		}
	}()
	if pid == 0 || pid == os.Getpid() {
		t.Fatalf("control plane in process %d; this is %d", pid, os.Getpid())
	}
	log, err := other.AuditLog()
	if err != nil {
		t.Fatal(err)
	}
	h, err := other.AddHost(ctx, HostOptions{Name: "own-process-1", DownTime: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n, err := other.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !NodeReady(n) || n.Status.NodeInfo.BootID != h.BootID() {
		t.Errorf("node Ready %v with boot ID %q, want Ready with %q", NodeReady(n), n.Status.NodeInfo.BootID, h.BootID())
	}
	rs, err := log.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Where(func(r Request) bool { return r.User == "system:node:"+h.Name }).Count(Verb); got["create"] == 0 || got["patch"] == 0 {
		t.Errorf("the host's requests by verb %v, want its Node created and its status patched", got)
	}
	other.RemoveHost(ctx, h)
	newHost(t, ctx, HostOptions{}) // requests in a queued level here too
	for name, c := range map[string]*ControlPlane{"its own process": other, "this process": cp} {
		mfs, err := c.Metrics(ctx, apfWait)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		levels := map[string]bool{}
		for _, m := range mfs[apfWait].GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if math.IsInf(b.GetUpperBound(), 0) {
					t.Errorf("%s: a bucket bounded at %v (the registry's histograms leave +Inf implicit)", name, b.GetUpperBound())
				}
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "priority_level" && m.GetHistogram().GetSampleCount() > 0 {
					levels[l.GetValue()] = true
				}
			}
		}
		// The hosts' requests are in the kubelets' level.
		if !levels["node-high"] || len(mfs) != 1 {
			t.Errorf("%s: %d families; the queue waits recorded in levels %v", name, len(mfs), levels)
		}
	}
	if cpu := other.ProcessCPU(); cpu <= 0 || cpu > time.Since(began)*time.Duration(runtime.NumCPU()) {
		t.Errorf("the control plane's process used %s of CPU", cpu)
	}
	if cpu := cp.ProcessCPU(); cpu != 0 {
		t.Errorf("the control plane in this process: %s of CPU of its own process, want 0", cpu)
	}
	other.Stop()
	stopped = true
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d after Stop: %v, want gone", pid, err)
	}
}

func TestReboot(t *testing.T) {
	ctx := testCtx(t)
	h := newHost(t, ctx, HostOptions{DownTime: 300 * time.Millisecond})
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()

	var starts atomic.Int64
	h.AddService("counter", func(ctx context.Context) error {
		starts.Add(1)
		<-ctx.Done()
		return nil
	})
	h.AddProcess("sleeper", func() *exec.Cmd { return exec.Command("sleep", "600") })
	first := h.Process("sleeper")
	changed := h.SentinelChanged()
	if err := h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	if !isClosed(changed) {
		t.Error("SentinelChanged not told of the sentinel set")
	}
	if err := h.AwaitRebootRequired(ctx); err != nil {
		t.Fatal(err)
	}
	changed = h.SentinelChanged()
	before := h.BootID()

	cmd := h.RebootCommand()
	if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("reboot command: %v %s", err, out)
	}
	waitFor(t, ctx, "second boot", func() bool { return h.Boots() == 2 && h.Up() })
	if h.BootID() == before {
		t.Error("boot ID unchanged")
	}
	if h.RebootRequired() {
		t.Error("sentinel survived the reboot")
	}
	if !isClosed(changed) {
		t.Error("SentinelChanged not told of the sentinel the reboot removed")
	}
	// The services start right after the boot, in their own goroutines.
	waitFor(t, ctx, "the service started again", func() bool { return starts.Load() == 2 })
	waitFor(t, ctx, "the process started again", func() bool {
		p := h.Process("sleeper")
		return p != nil && p.Pid != first.Pid
	})
	if err := first.Signal(syscall.Signal(0)); err == nil {
		t.Error("the first process survived the reboot")
	}
	waitFor(t, ctx, "Ready with the new boot ID", func() bool {
		n := getNode(t, ctx, h.Name)
		return NodeReady(n) && n.Status.NodeInfo.BootID == h.BootID()
	})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The auditor saw NotReady with the old boot ID, then the new boot.
	var sawDown, sawNew bool
	for _, s := range a.History() {
		if s.Node != h.Name {
			continue
		}
		sawDown = sawDown || (!s.Ready && s.BootID == before)
		sawNew = sawNew || (s.Ready && s.BootID == h.BootID())
	}
	if !sawDown || !sawNew {
		t.Errorf("auditor saw NotReady in the old boot: %v, Ready in the new: %v", sawDown, sawNew)
	}
}

func TestKubeletFinishesEvictedPod(t *testing.T) {
	ctx := testCtx(t)
	h := newHost(t, ctx, HostOptions{})
	ns := "evict-" + h.Name
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	rs, err := cp.ReplicaSet(ctx, ns, "web", 1, labels)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cp.Pod(ctx, h, ns, "web-1", Replicated, rs, labels)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitRunning(ctx, ns, p.Name); err != nil {
		t.Fatal(err)
	}
	// Evict with the node's own credentials, as kured-host drains.
	err = authorizerLag(ctx, func() error {
		return h.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns}})
	})
	if err != nil {
		t.Fatalf("evict: %v", err)
	}
	waitFor(t, ctx, "the evicted pod to be gone", func() bool {
		_, err := cp.Admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestDisruptionController(t *testing.T) {
	ctx := testCtx(t)
	h := newHost(t, ctx, HostOptions{})
	ns := "pdb-" + h.Name
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "db"}
	rs, err := cp.ReplicaSet(ctx, ns, "db", 3, labels)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.PDB(ctx, ns, "db", 2, labels); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := fmt.Sprintf("db-%d", i)
		if _, err := cp.Pod(ctx, h, ns, name, Replicated, rs, labels); err != nil {
			t.Fatal(err)
		}
		if err := cp.WaitRunning(ctx, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	// 3 healthy, at least 2 must stay: one disruption allowed.
	if err := cp.WaitPDB(ctx, ns, "db", 1); err != nil {
		t.Fatal(err)
	}
	// The budget is enforced on the node's evictions: the first goes
	// through, the second is refused with 429 until pods come back.
	evict := func(name string) error {
		return h.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}
	if err := authorizerLag(ctx, func() error { return evict("db-0") }); err != nil {
		t.Fatalf("first eviction: %v", err)
	}
	if err := cp.WaitPDB(ctx, ns, "db", 0); err != nil {
		t.Fatal(err)
	}
	if err := evict("db-1"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("second eviction: %v, want 429 TooManyRequests", err)
	}
}

// TestTwentyHosts registers 20 hosts and reports what they cost.
func TestTwentyHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("20 hosts")
	}
	ctx := testCtx(t)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	began := time.Now()
	for i := range 20 {
		newHost(t, ctx, HostOptions{Name: fmt.Sprintf("many-%02d", i), Labels: map[string]string{"topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+i%3)}})
	}
	took := time.Since(began)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	list, err := cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/hostname in (" + hostNames(20) + ")"})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for i := range list.Items {
		if NodeReady(&list.Items[i]) {
			ready++
		}
	}
	if ready != 20 {
		t.Fatalf("%d of 20 hosts Ready", ready)
	}
	t.Logf("20 hosts registered in %s; Go heap in use %d MiB (was %d MiB); process RSS %d MiB",
		took.Round(time.Millisecond), after.HeapInuse>>20, before.HeapInuse>>20, rssMiB())
}

func hostNames(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("many-%02d", i)
	}
	return strings.Join(names, ",")
}

func rssMiB() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb >> 10
		}
	}
	return -1
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
