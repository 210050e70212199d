package vmtest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/test/cluster"
)

// TestRealKubelet: the real kubelet (the harness's Kubernetes version)
// and Debian's containerd in the VM, with graceful node shutdown on. The
// kubelet registers the Node itself and holds logind's delay inhibitor,
// which kured-host does not count as a blocker (a block-mode one it
// does). A replicated pod runs the workload image in a real container,
// under a budget that first refuses its eviction. With two simulated
// peers, one slot: the VM waits its turn, cordons and drains; the kubelet
// is restarted in the middle of the drain (the container keeps running,
// the drain goes on, the slot stays held, no reboot); the budget lets go,
// the kubelet stops the container (which says it got SIGTERM); kured-host
// asks logind to reboot; the kubelet's inhibitor delays the shutdown while
// it reports the node shutting down; the VM reboots; the kubelet reports
// the new boot; kured-host uncordons and releases. The auditor and the
// serial console give the order.
func TestRealKubelet(t *testing.T) {
	ctx := scenario(t, 10*time.Minute)
	v := startRealKubeletVM(t, ctx, "vm-kubelet")
	node, err := env.cp.Admin.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := node.Status.NodeInfo
	t.Logf("the Node as the kubelet registered it: kubelet %s, runtime %s, %s, kernel %s, labels %v",
		info.KubeletVersion, info.ContainerRuntimeVersion, info.OSImage, info.KernelVersion, node.Labels)
	if !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("container runtime %q, want containerd", info.ContainerRuntimeVersion)
	}

	// Graceful node shutdown: the kubelet's delay inhibitor.
	inhibitors := v.Must(ctx, "systemd-inhibit --list --no-pager")
	t.Logf("logind's inhibitors with the kubelet running:\n%s", inhibitors)
	if !regexp.MustCompile(`(?m)kubelet.*shutdown.*delay`).MatchString(inhibitors) {
		t.Errorf("no delay inhibitor of the kubelet for shutdown")
	}

	peers := []*peer{startPeer(t, ctx, "vm-kubelet-peer-1"), startPeer(t, ctx, "vm-kubelet-peer-2")}
	install(ctx, v)
	dropIn(ctx, v, "50-vmtest.toml", fastRecheck)
	if code, out := v.Exit(ctx, "kured-host check"); code != 0 {
		t.Errorf("kured-host check with the real kubelet: exit status %d:\n%s", code, out)
	} else {
		t.Logf("kured-host check with the real kubelet:\n%s", out)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "fail") {
				t.Errorf("kured-host check: %s", l)
			}
		}
	}
	enable(ctx, v)

	// kured-host counts a block-mode inhibitor as a blocker, never the
	// kubelet's delay one: with only the kubelet's, the status is idle
	// (enable waited for it); with a block-mode one as well, a reboot
	// needed waits for it.
	v.Must(ctx, "systemd-run --unit=vmtest-block systemd-inhibit --what=shutdown --mode=block --who=vmtest --why='a block-mode inhibitor' sleep infinity")
	v.Must(ctx, "touch /run/reboot-required")
	blocked := waitStatus(ctx, v, "reboot needed; waiting: inhibitors")
	t.Logf("with a block-mode inhibitor: %q", blocked)
	if strings.Contains(blocked, "kubelet") {
		t.Errorf("the kubelet's delay inhibitor counted as a blocker: %q", blocked)
	}
	if st, _, _ := claimOf(t, ctx, v.Name); st != "" {
		t.Errorf("claim %q while a block-mode inhibitor holds", st)
	}

	pod := realPodOn(t, ctx, "vmtest", "web-kubelet", v.Name)
	if _, err := env.cp.PDB(ctx, pod.Namespace, pod.Name, 1, pod.Labels); err != nil {
		t.Fatal(err)
	}
	if err := env.cp.WaitPDB(ctx, pod.Namespace, pod.Name, 0); err != nil {
		t.Fatal(err)
	}
	a := auditNodes(t, ctx, v.Name, peers[0].h.Name, peers[1].h.Name)

	oldBoot := v.WaitUp(ctx, "")
	began := time.Now()
	peersTakeTheSlot(t, ctx, peers)
	v.Must(ctx, "systemctl stop vmtest-block")
	waiting := waitStatus(ctx, v, "waiting for a reboot slot", inQueue...)
	t.Logf("the VM's kured-host, the block-mode inhibitor gone: %q", waiting)

	waitStatus(ctx, v, "holding a reboot slot: draining")
	restartKubeletMidDrain(t, ctx, v, oldBoot)
	if err := env.cp.Admin.PolicyV1().PodDisruptionBudgets(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	newBoot := waitRolled(t, ctx, v, a, peers, oldBoot, began)
	checkKubeletTimeline(t, a, v.Name, oldBoot, newBoot)

	if _, err := env.cp.Admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s/%s was not drained: %v", pod.Namespace, pod.Name, err)
	}
	// What the container said, in the host directory it wrote to (the
	// kubelet removes a deleted pod's logs): it got SIGTERM and ended.
	logs := v.Must(ctx, "cat "+workloadHostDir+"/workload.log")
	t.Logf("the workload's lines:\n%s", logs)
	for _, want := range []string{"workload started", "workload stopping: SIGTERM"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the workload's log lacks %q", want)
		}
	}

	waitFor(t, ctx, "the daemon's last line on the serial console", func() bool {
		return strings.Contains(v.Serial(2), "slot released")
	})
	re := regexp.MustCompile(`boot ID|kured-host\[\d+\]: .*(msg="reboot needed"|waiting|joined|took a reboot slot|cordoned|drained|rebooting|back after|slot released)|systemd-logind|[Ss]hutdown manager|Restarting system|Started kubelet|Stopped kubelet`)
	t.Logf("serial console, boot 1:\n%s", strings.Join(v.Excerpt(1, re), "\n"))
	t.Logf("serial console, boot 2:\n%s", strings.Join(v.Excerpt(2, re), "\n"))
	// The console has each process's lines in the order that process
	// wrote them, and the kernel's last line after all of them; the order
	// across processes is not the console's (journald forwards them as it
	// reads them, and the kubelet writes "completed processing" after it
	// has let logind go on: its release comes first), but the auditor's
	// (slot, cordon, the kubelet's shutdown, the new boot, release) and
	// the journal's clock (checkShutdownDelayed).
	checkShutdownDelayed(t, ctx, v)
	serial := v.Serial(1)
	for who, lines := range map[string][]string{
		"kured-host":     {"took a reboot slot", "drained", "msg=rebooting"},
		"the kubelet":    {"Shutdown manager detected new shutdown event", "Shutdown manager completed processing shutdown event"},
		"systemd-logind": {"System is rebooting"},
	} {
		want := append([]string{"kured-host-vm: boot ID " + oldBoot}, lines...)
		checkInOrder(t, "boot 1's serial console, "+who, serial, append(want, "reboot: Restarting system"))
	}
	checkInOrder(t, "boot 2's serial console", v.Serial(2), []string{
		"kured-host-vm: boot ID " + newBoot,
		"back after the reboot",
		"slot released",
	})
}

// checkShutdownDelayed checks, in the journal of the boot before, that
// logind went on with the reboot only after the kubelet had begun its
// shutdown handling: the time the kubelet wrote "processing shutdown
// event" (its own log's clock, before it lets go of its delay inhibitor)
// is before the time journald received logind's "System is rebooting"
// (which logind writes once no delay inhibitor is left).
func checkShutdownDelayed(t *testing.T, ctx context.Context, v *VM) {
	t.Helper()
	kubelet := v.Must(ctx, "journalctl -b -1 -u kubelet -o cat --no-pager")
	m := regexp.MustCompile(`I(\d{4} \d\d:\d\d:\d\d\.\d{6})\s+\d+ nodeshutdown_manager_linux.go:\d+\] "Shutdown manager processing shutdown event"`).FindStringSubmatch(kubelet)
	logind := v.Must(ctx, "journalctl -b -1 -t systemd-logind -o short-unix --no-pager")
	r := regexp.MustCompile(`(?m)^(\d+)\.(\d{6}) .*System is rebooting`).FindStringSubmatch(logind)
	if m == nil || r == nil {
		t.Errorf("the journal of boot 1 lacks the kubelet's processing of the shutdown (%v) or logind's reboot (%v)", m != nil, r != nil)
		return
	}
	sec, _ := strconv.ParseInt(r[1], 10, 64)
	usec, _ := strconv.ParseInt(r[2], 10, 64)
	rebooting := time.Unix(sec, usec*1000).UTC()
	// klog's header has no year, and the guest's zone is UTC.
	began, err := time.Parse("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", rebooting.Year(), m[1]))
	if err != nil {
		t.Errorf("the kubelet's time %q: %v", m[1], err)
		return
	}
	t.Logf("logind went on with the reboot %v after the kubelet began its shutdown handling", rebooting.Sub(began).Round(time.Millisecond))
	if !rebooting.After(began) {
		t.Errorf("logind rebooting at %s, before the kubelet's shutdown handling at %s: the delay inhibitor did not hold it", rebooting.Format(time.StampMicro), began.Format(time.StampMicro))
	}
}

// restartKubeletMidDrain restarts the kubelet while kured-host drains
// (a budget refuses the eviction): a new kubelet process reports the node
// Ready in the same boot and takes a new delay inhibitor; the container
// keeps running; kured-host goes on draining, the node cordoned, the slot
// held in the same boot, no reboot.
func restartKubeletMidDrain(t *testing.T, ctx context.Context, v *VM, boot string) {
	t.Helper()
	kubeletPID := func() string { return strings.TrimSpace(v.Must(ctx, "systemctl show -p MainPID --value kubelet")) }
	before := kubeletPID()
	v.Must(ctx, "systemctl restart kubelet")
	var after string
	v.waitFor(ctx, "a new kubelet process", func() bool {
		after = kubeletPID()
		return after != before && after != "0"
	})
	v.waitFor(ctx, "the new kubelet's delay inhibitor", func() bool {
		res, err := v.Poll(ctx, "systemd-inhibit --list --no-pager")
		return err == nil && regexp.MustCompile(`(?m)kubelet\s+\d+\s+\S+\s+`+after+`\s.*shutdown.*delay`).MatchString(res.Output)
	})
	v.WaitUp(ctx, "")
	time.Sleep(10 * time.Second) // a few drain attempts against the budget
	status := statusText(ctx, v)
	st, c, unsched := claimOf(t, ctx, v.Name)
	t.Logf("kubelet restarted mid-drain (pid %s -> %s): kured-host %q, claim %s, phase %s, boot %.8s, unschedulable %v",
		before, after, status, st, c.Phase, c.BootID, unsched)
	if st != claim.Holding || c.Phase != claim.PhaseDraining || c.BootID != boot || !unsched || v.Boots() != 1 {
		t.Fatalf("after the kubelet's restart: claim %q, phase %q, boot %s, unschedulable %v, boots %d; want holding, draining, %s, cordoned, 1",
			st, c.Phase, c.BootID, unsched, v.Boots(), boot)
	}
	if !strings.HasPrefix(status, "holding a reboot slot: draining") {
		t.Errorf("kured-host's status after the kubelet's restart: %q", status)
	}
	if n := strings.Count(v.Must(ctx, "cat "+workloadHostDir+"/workload.log"), "workload started"); n != 1 {
		t.Errorf("the workload started %d times, want once: the kubelet's restart must not restart the container", n)
	}
}

// checkKubeletTimeline checks, in the auditor's record of the VM's Node,
// the order the kubelet and kured-host went through: the slot taken and
// the node cordoned in the old boot; the kubelet reporting the node not
// ready, shutting down, in the old boot (graceful node shutdown); the new
// boot reported Ready; and only then the release.
func checkKubeletTimeline(t *testing.T, a *cluster.Auditor, node, oldBoot, newBoot string) {
	t.Helper()
	steps := []struct {
		what string
		when func(s cluster.NodeState) bool
	}{
		{"slot taken", func(s cluster.NodeState) bool { return s.Holding() }},
		{"cordoned", func(s cluster.NodeState) bool { return s.Unschedulable }},
		{"kubelet: node is shutting down", func(s cluster.NodeState) bool {
			return !s.Ready && s.BootID == oldBoot && strings.Contains(s.ReadyMessage, "shutting down")
		}},
		{"kubelet: new boot Ready", func(s cluster.NodeState) bool { return s.Ready && s.BootID == newBoot }},
		{"uncordoned and released", func(s cluster.NodeState) bool { return s.ClaimLabel == "" && !s.Unschedulable }},
	}
	// Each step is looked for after the one before it.
	var seen []time.Time
	for _, s := range a.History() {
		if s.Node != node || len(seen) == len(steps) {
			continue
		}
		if steps[len(seen)].when(s) {
			seen = append(seen, s.Seen)
		}
	}
	var lines []string
	for i, at := range seen {
		lines = append(lines, fmt.Sprintf("%+6.1fs %s", at.Sub(seen[0]).Seconds(), steps[i].what))
	}
	t.Logf("the VM's Node as the auditor saw it, from the slot taken:\n%s", strings.Join(lines, "\n"))
	if len(seen) < len(steps) {
		t.Errorf("the Node's record lacks %q (or has it out of order)", steps[len(seen)].what)
	}
}

// checkInOrder checks that each of want appears in log after the one
// before it.
func checkInOrder(t *testing.T, what, log string, want []string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(log[at:], w)
		if i < 0 {
			t.Errorf("%s: %q not found after %q", what, w, log[max(0, at-80):at])
			return
		}
		at += i + len(w)
	}
}

// workloadHostDir is the VM's directory the workload's container writes
// its lines to (mounted at /vmtest).
const workloadHostDir = "/var/lib/vmtest-workload"

// realPodOn is podOn for the real kubelet: the workload image, which is
// imported, never pulled; no service account token (the harness runs
// no controller that would publish the root CA for it); a host
// directory for the workload's lines.
func realPodOn(t *testing.T, ctx context.Context, ns, name, node string) *corev1.Pod {
	t.Helper()
	p := createReplicaPod(t, ctx, ns, name, node, func(p *corev1.Pod) {
		p.Spec.AutomountServiceAccountToken = ptr.To(false)
		p.Spec.Containers[0].Image = workloadImage
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
		p.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: workloadHostDir, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/vmtest"}}
	})
	// A real container under emulation: the sandbox, the network, the
	// image's first unpack take longer than cp.WaitRunning waits.
	waitFor(t, ctx, "pod "+ns+"/"+name+" running on "+node, func() bool {
		got, err := env.cp.Admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning
	})
	return p
}
