package vmtest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
)

// TestInstallAndEnable: apt installs the package; the service is neither
// enabled nor running until `systemctl enable --now`; then `systemctl
// status` shows the daemon's STATUS= line, the journal has priorities,
// and systemd-analyze scores the unit's hardening.
func TestInstallAndEnable(t *testing.T) {
	ctx := scenario(t, 4*time.Minute)
	v := startVM(t, ctx, "vm-install")

	if code, out := v.Exit(ctx, "systemctl status kured-host"); code != 4 {
		t.Errorf("before the install, systemctl status kured-host: exit status %d, want 4 (no such unit):\n%s", code, out)
	}
	out := install(ctx, v)
	if !strings.Contains(out, "systemctl enable --now kured-host") {
		t.Errorf("apt's output lacks the postinst's advice:\n%s", out)
	}
	if code, out := v.Exit(ctx, "systemctl is-enabled kured-host"); code == 0 || strings.TrimSpace(out) != "disabled" {
		t.Errorf("after the install, systemctl is-enabled: exit status %d, %q; want disabled", code, out)
	}
	if code, out := v.Exit(ctx, "systemctl is-active kured-host"); code == 0 || strings.TrimSpace(out) != "inactive" {
		t.Errorf("after the install, systemctl is-active: exit status %d, %q; want inactive", code, out)
	}
	if code, out := v.Exit(ctx, "kured-host check"); code != 0 {
		t.Errorf("kured-host check: exit status %d:\n%s", code, out)
	} else {
		t.Logf("kured-host check in the VM:\n%s", out)
	}

	enable(ctx, v)
	status := v.Must(ctx, "systemctl status kured-host")
	t.Logf("systemctl status kured-host:\n%s", status)
	for _, want := range []string{"Active: active (running)", `Status: "idle: no reboot needed"`, "enabled;"} {
		if !strings.Contains(status, want) {
			t.Errorf("systemctl status lacks %q", want)
		}
	}
	info := v.Must(ctx, "journalctl -u kured-host -p info --no-pager")
	warn := v.Must(ctx, "journalctl -u kured-host -p warning --no-pager")
	// The kubeconfig comes from systemd's kubelet.service, not from a
	// process name in /proc (which the unit's ProtectProc= hides anyway).
	if !regexp.MustCompile(`msg=connected kubeconfig=/etc/kubernetes/kubelet.conf found_by="the --kubeconfig of the kubelet in kubelet.service \(pid [0-9]+\)"`).MatchString(info) {
		t.Errorf("the daemon did not find the kubeconfig through kubelet.service:\n%s", info)
	}
	if !strings.Contains(info, "level=INFO msg=ready") || strings.Contains(warn, "level=INFO") {
		t.Errorf("journal priorities: -p info should have the daemon's info lines and -p warning not:\n-p info:\n%s\n-p warning:\n%s", info, warn)
	}
	t.Logf("journalctl -u kured-host -p warning:\n%s", warn)
	// The unit's sandbox (no capabilities, a system call filter) still
	// lets the daemon hand its start-up pages back.
	if !strings.Contains(info, "binary pages used at start-up handed back to the kernel") {
		t.Errorf("the journal does not say the start-up pages were handed back:\n%s", info)
	}
	t.Logf("memory of the idle daemon in the VM: %s", strings.Join(strings.Fields(v.Must(ctx, "grep -E '^(VmRSS|RssAnon|RssFile):' /proc/"+mainPID(ctx, v)+"/status")), " "))

	sec := v.Must(ctx, "systemd-analyze security --no-pager kured-host.service")
	m := regexp.MustCompile(`Overall exposure level for kured-host.service: ([0-9.]+) (\S+)`).FindStringSubmatch(sec)
	if m == nil {
		t.Fatalf("systemd-analyze security: no overall exposure level:\n%s", sec)
	}
	t.Logf("systemd-analyze security kured-host (systemd in the VM): %s %s", m[1], m[2])
	if score, _ := strconv.ParseFloat(m[1], 64); score > 1.8 {
		t.Errorf("exposure %s, want at most 1.8:\n%s", m[1], sec)
	}
	if st, _, _ := claimOf(t, ctx, v.Name); st != "" {
		t.Errorf("claim %q with no reboot needed", st)
	}
}

// TestBadConfiguration: with a bad drop-in, `systemctl start` fails, the
// unit is not restarted (exit status 2), and `systemctl status` and the
// journal name the file, the line and the key.
func TestBadConfiguration(t *testing.T) {
	ctx := scenario(t, 4*time.Minute)
	v := startVM(t, ctx, "vm-badconfig")
	install(ctx, v)
	dropIn(ctx, v, "50-bad.toml", "[lock]\nconcurrency = 0\n\n[drain]\ntimeot = \"5m\"\n")

	if code, out := v.Exit(ctx, "systemctl start kured-host"); code == 0 {
		t.Fatalf("systemctl start with a bad configuration succeeded:\n%s", out)
	} else {
		t.Logf("systemctl start kured-host: exit status %d:\n%s", code, out)
	}
	wants := []string{
		"/etc/kured-host/config.d/50-bad.toml:2: lock.concurrency: must be at least 1, got 0",
		`/etc/kured-host/config.d/50-bad.toml:5: drain.timeot: unknown key "timeot"`,
	}
	_, status := v.Exit(ctx, "systemctl status kured-host")
	t.Logf("systemctl status kured-host:\n%s", status)
	journal := v.Must(ctx, "journalctl -u kured-host -p err --no-pager")
	for _, want := range wants {
		if !strings.Contains(status, want) {
			t.Errorf("systemctl status lacks %q", want)
		}
		if !strings.Contains(journal, want) {
			t.Errorf("journalctl -p err lacks %q:\n%s", want, journal)
		}
	}
	// RestartSec is 10s: past it, a restart would have happened.
	time.Sleep(12 * time.Second)
	show := v.Must(ctx, "systemctl show -p ActiveState -p Result -p ExecMainStatus -p NRestarts kured-host")
	for _, want := range []string{"ActiveState=failed", "ExecMainStatus=2", "NRestarts=0"} {
		if !strings.Contains(show, want) {
			t.Errorf("systemctl show lacks %s:\n%s", want, show)
		}
	}
}

// TestRealReboot: the VM and two simulated peers need a reboot, one node
// at a time. The VM waits its turn, cordons, drains its pod, asks logind
// to reboot and really reboots (a new boot ID on the serial console);
// kured-host starts again on the next boot, sees the new boot ID, waits
// for Ready, uncordons and releases the slot. The auditor checks that no
// two nodes held a slot at once.
func TestRealReboot(t *testing.T) {
	ctx := scenario(t, 5*time.Minute)
	v := startVM(t, ctx, "vm-reboot")
	peers := []*peer{startPeer(t, ctx, "vm-peer-1"), startPeer(t, ctx, "vm-peer-2")}
	install(ctx, v)
	dropIn(ctx, v, "50-vmtest.toml", fastRecheck)
	enable(ctx, v)
	pod := podOn(t, ctx, "vmtest", "web-reboot", v.Name)

	a := auditNodes(t, ctx, v.Name, "vm-peer-1", "vm-peer-2")

	oldBoot := v.WaitUp(ctx, "")
	began := time.Now()
	peersTakeTheSlot(t, ctx, peers)
	v.Must(ctx, "touch /run/reboot-required")
	waiting := waitStatus(ctx, v, "waiting for a reboot slot", inQueue...)
	t.Logf("the VM's kured-host: %q", waiting)

	newBoot := waitRolled(t, ctx, v, a, peers, oldBoot, began)
	order, waited := heldInOrder(a, v.Name)
	t.Logf("slots taken in this order: %v", order)
	if !waited {
		t.Errorf("the VM never waited while a peer held the slot")
	}
	var acq []string
	for _, q := range a.Acquisitions() {
		if q.Node != v.Name {
			continue
		}
		acq = append(acq, q.BootHeld+" -> "+q.BootLeft)
		if !q.ReleasedOK || q.BootHeld != oldBoot || q.BootLeft != newBoot {
			t.Errorf("the VM's slot: held in boot %s, released in boot %s (released %v); want %s -> %s", q.BootHeld, q.BootLeft, q.ReleasedOK, oldBoot, newBoot)
		}
	}
	if len(acq) != 1 {
		t.Errorf("the VM took %d slots (%v), want 1", len(acq), acq)
	}
	if _, err := env.cp.Admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s/%s was not drained: %v", pod.Namespace, pod.Name, err)
	}

	// The serial console: the two boots, logind's reboot, the daemon's
	// lines. The daemon logs "slot released" after the release's Event,
	// so the line may reach the console after the admin saw the release.
	waitFor(t, ctx, "the daemon's last line on the serial console", func() bool {
		return strings.Contains(v.Serial(2), "slot released")
	})
	boot1, boot2 := v.Serial(1), v.Serial(2)
	for _, c := range []struct{ log, want string }{
		{boot1, "kured-host-vm: boot ID " + oldBoot},
		{boot1, "System is rebooting"},
		{boot1, "reboot: Restarting system"},
		{boot2, "kured-host-vm: boot ID " + newBoot},
		{boot2, "back after the reboot"},
		{boot2, "slot released"},
	} {
		if !strings.Contains(c.log, c.want) {
			t.Errorf("serial console lacks %q", c.want)
		}
	}
	re := regexp.MustCompile(`boot ID|kured-host\[\d+\]|systemd-logind|Restarting system|node registered|NotReady`)
	t.Logf("serial console, boot 1:\n%s", strings.Join(v.Excerpt(1, re), "\n"))
	t.Logf("serial console, boot 2:\n%s", strings.Join(v.Excerpt(2, re), "\n"))

	status := v.Must(ctx, "systemctl status kured-host")
	t.Logf("systemctl status kured-host after the reboot:\n%s", status)
	// "idle: rebooted" once released, then "idle: no reboot needed" at
	// once: the sentinel was on tmpfs.
	if !strings.Contains(status, `Status: "idle: `) {
		t.Errorf("status after the reboot is not idle")
	}
	before := v.Must(ctx, "journalctl -b -1 -u kured-host --no-pager")
	after := v.Must(ctx, "journalctl -b 0 -u kured-host --no-pager")
	for _, want := range []string{"joined the queue", "took a reboot slot", "cordoned", "drained", "rebooting"} {
		if !strings.Contains(before, want) {
			t.Errorf("the journal of the first boot lacks %q:\n%s", want, before)
		}
	}
	for _, want := range []string{"back after the reboot", "uncordoned", "slot released"} {
		if !strings.Contains(after, want) {
			t.Errorf("the journal of the second boot lacks %q:\n%s", want, after)
		}
	}
}

// TestRebootWaitsForPackageManager: a package is being installed (apt,
// which holds a logind shutdown inhibitor while dpkg runs) when a reboot
// becomes needed. kured-host reports the block and does not take a
// slot nor reboot while the installation lasts, then does once it ends.
func TestRebootWaitsForPackageManager(t *testing.T) {
	ctx := scenario(t, 5*time.Minute)
	v := startVM(t, ctx, "vm-inhibit")
	install(ctx, v)
	dropIn(ctx, v, "50-vmtest.toml", fastRecheck)
	enable(ctx, v)

	// A package whose postinst lasts until the test lets it finish.
	v.Must(ctx, `set -e
mkdir -p /root/slow/DEBIAN
cat >/root/slow/DEBIAN/control <<'EOF'
Package: vmtest-slow
Version: 1.0
Architecture: all
Maintainer: kured-host VM test <test@kured-host.invalid>
Description: installs until /run/vmtest-continue exists
EOF
printf '#!/bin/sh\nwhile [ ! -e /run/vmtest-continue ]; do sleep 1; done\n' >/root/slow/DEBIAN/postinst
chmod 0755 /root/slow/DEBIAN/postinst
dpkg-deb --build /root/slow /root/vmtest-slow.deb`)
	// apt takes a logind inhibitor ("block" shutdown) while dpkg runs.
	v.Must(ctx, "systemd-run --unit=vmtest-install --setenv=DEBIAN_FRONTEND=noninteractive apt-get install -y /root/vmtest-slow.deb")
	v.waitFor(ctx, "apt at work, with its inhibitor", func() bool {
		res, err := v.Poll(ctx, "systemd-inhibit --list --no-pager && pgrep -f '[v]mtest-slow.postinst'")
		return err == nil && res.Code == 0 && strings.Contains(res.Output, "APT is installing or removing packages")
	})
	a, err := env.cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return n == v.Name }

	oldBoot := v.WaitUp(ctx, "")
	v.Must(ctx, "touch /run/reboot-required")
	blocked := waitStatus(ctx, v, "reboot needed; waiting: inhibitors: ")
	t.Logf("while apt is at work: %q", blocked)
	if !strings.Contains(blocked, "APT is installing or removing packages") {
		t.Errorf("status does not name the inhibitor: %q", blocked)
	}
	// Three rechecks at least: still blocked, no claim, no reboot.
	time.Sleep(20 * time.Second)
	if st, _, _ := claimOf(t, ctx, v.Name); st != "" || v.Boots() != 1 {
		t.Fatalf("while apt is at work: claim %q, boots %d", st, v.Boots())
	}
	if s := statusText(ctx, v); !strings.HasPrefix(s, "reboot needed; waiting: inhibitors: ") {
		t.Errorf("still blocked, the status says %q", s)
	}
	events, err := env.cp.Admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + v.Name + ",reason=Blocked"})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no Blocked event on the Node (%v)", err)
	} else {
		t.Logf("event: %s %s", events.Items[0].Reason, events.Items[0].Message)
	}

	v.Must(ctx, "touch /run/vmtest-continue")
	released := time.Now()
	v.waitFor(ctx, "the VM to reboot after the install", func() bool { return v.Boots() >= 2 })
	t.Logf("rebooted %s after the installation ended", time.Since(released).Round(100*time.Millisecond))
	newBoot := v.WaitUp(ctx, oldBoot)
	waitFor(t, ctx, "the VM's slot released", func() bool {
		st, _, unsched := claimOf(t, ctx, v.Name)
		return st == "" && !unsched
	})
	if out := v.Must(ctx, "dpkg-query -W -f '${Status}' vmtest-slow"); out != "install ok installed" {
		t.Errorf("vmtest-slow after the reboot: %q, want installed", out)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(limits); err != nil {
		t.Error(err)
	}
	for _, s := range a.History() {
		if s.Node == v.Name && s.ClaimLabel != "" && s.Seen.Before(released) {
			t.Errorf("claim %q at %s, before the installation ended", s.ClaimLabel, s.Seen.Format(time.RFC3339Nano))
			break
		}
	}
	if boot2 := v.Serial(2); !strings.Contains(boot2, "boot ID "+newBoot) {
		t.Errorf("serial console of boot 2 lacks its boot ID %s", newBoot)
	}
}

// TestRestartIsNotReboot: the VM holds the slot and drains, held back by
// a PodDisruptionBudget; `systemctl restart kured-host` neither releases
// the slot nor reboots; the daemon resumes, and once the budget goes, it
// reboots and only then releases.
func TestRestartIsNotReboot(t *testing.T) {
	ctx := scenario(t, 5*time.Minute)
	v := startVM(t, ctx, "vm-restart")
	install(ctx, v)
	dropIn(ctx, v, "50-vmtest.toml", fastRecheck)
	enable(ctx, v)
	pod := podOn(t, ctx, "vmtest", "web-restart", v.Name)
	if _, err := env.cp.PDB(ctx, "vmtest", "web-restart", 1, pod.Labels); err != nil {
		t.Fatal(err)
	}
	if err := env.cp.WaitPDB(ctx, "vmtest", "web-restart", 0); err != nil {
		t.Fatal(err)
	}
	a, err := env.cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return n == v.Name }

	oldBoot := v.WaitUp(ctx, "")
	v.Must(ctx, "touch /run/reboot-required")
	waitStatus(ctx, v, "holding a reboot slot: draining")
	st, c, _ := claimOf(t, ctx, v.Name)
	if st != claim.Holding || c.Phase != claim.PhaseDraining || c.BootID != oldBoot {
		t.Fatalf("before the restart: claim %q, phase %q, boot %s", st, c.Phase, c.BootID)
	}
	pid := mainPID(ctx, v)
	v.Must(ctx, "systemctl restart kured-host")
	waitStatus(ctx, v, "holding a reboot slot: draining")
	if p := mainPID(ctx, v); p == pid {
		t.Fatalf("MainPID %s did not change across the restart", p)
	}
	time.Sleep(10 * time.Second)
	st, c, unsched := claimOf(t, ctx, v.Name)
	if st != claim.Holding || c.BootID != oldBoot || !unsched || v.Boots() != 1 {
		t.Fatalf("after the restart: claim %q, phase %q, boot %s, unschedulable %v, boots %d", st, c.Phase, c.BootID, unsched, v.Boots())
	}
	t.Logf("after systemctl restart: claim %s, phase %s, still in boot %s", st, c.Phase, c.BootID)

	if err := env.cp.Admin.PolicyV1().PodDisruptionBudgets("vmtest").Delete(ctx, "web-restart", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	v.waitFor(ctx, "the VM to reboot once the budget is gone", func() bool { return v.Boots() >= 2 })
	v.WaitUp(ctx, oldBoot)
	waitFor(t, ctx, "the VM's slot released", func() bool {
		st, _, unsched := claimOf(t, ctx, v.Name)
		return st == "" && !unsched
	})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(limits); err != nil {
		t.Error(err)
	}
	if n := len(a.Acquisitions()); n != 1 {
		t.Errorf("%d slots taken, want 1: the restart must not give the slot back", n)
	}
}

// TestUpgradeAndRemove: a newer package keeps the edited configuration
// and restarts the running daemon on the new binary; apt remove stops and
// disables the service and keeps the configuration; apt purge removes it.
func TestUpgradeAndRemove(t *testing.T) {
	ctx := scenario(t, 4*time.Minute)
	v := startVM(t, ctx, "vm-upgrade")
	install(ctx, v)
	version := func() string { return v.Must(ctx, "dpkg-query -W -f '${Version}' kured-host") }
	v1 := version()
	v.Must(ctx, `sed -i 's/^level = "info"/level = "debug"/' /etc/kured-host/config.toml && echo '# edited by the VM test' >>/etc/kured-host/config.toml`)
	edited := v.Must(ctx, "sha256sum /etc/kured-host/config.toml")
	enable(ctx, v)
	pid, binVersion := mainPID(ctx, v), v.Must(ctx, "kured-host version")

	out := v.Must(ctx, "apt-get install -y /mnt/share/upgrade/kured-host_*_amd64.deb")
	v2 := version()
	if v.Must(ctx, "dpkg --compare-versions '"+v2+"' gt '"+v1+"' && echo newer") != "newer\n" {
		t.Fatalf("upgrade from %s to %s is not newer:\n%s", v1, v2, out)
	}
	t.Logf("upgraded %s -> %s", v1, v2)
	if got := v.Must(ctx, "sha256sum /etc/kured-host/config.toml"); got != edited {
		t.Errorf("the upgrade changed the edited config.toml")
	}
	if code, out := v.Exit(ctx, "ls /etc/kured-host/ | grep dpkg-"); code == 0 {
		t.Errorf("the upgrade left %s", out)
	}
	waitStatus(ctx, v, "idle: no reboot needed")
	if p := mainPID(ctx, v); p == pid {
		t.Errorf("the daemon was not restarted by the upgrade (MainPID %s)", p)
	}
	if b := v.Must(ctx, "kured-host version"); b == binVersion {
		t.Errorf("kured-host version unchanged by the upgrade: %s", b)
	}
	if eff := v.Must(ctx, "kured-host check --config-only"); !strings.Contains(eff, `level = "debug"  # /etc/kured-host/config.toml:`) {
		t.Errorf("the edited log level is not in effect after the upgrade:\n%s", eff)
	}

	v.Must(ctx, "apt-get remove -y kured-host")
	if code, out := v.Exit(ctx, "systemctl is-active kured-host"); code == 0 {
		t.Errorf("after apt remove, the service is %s", out)
	}
	for _, c := range []string{
		"! pgrep -x kured-host",
		"test ! -e /etc/systemd/system/multi-user.target.wants/kured-host.service",
		"test ! -e /usr/bin/kured-host",
		"test -f /etc/kured-host/config.toml",
		`test "$(dpkg-query -W -f '${Status}' kured-host)" = "deinstall ok config-files"`,
	} {
		if code, out := v.Exit(ctx, c); code != 0 {
			t.Errorf("after apt remove: %s failed:\n%s", c, out)
		}
	}
	v.Must(ctx, "apt-get purge -y kured-host")
	for _, c := range []string{
		"test ! -e /etc/kured-host",
		`! dpkg-query -W -f '${Status}' kured-host 2>/dev/null | grep -q installed`,
	} {
		if code, out := v.Exit(ctx, c); code != 0 {
			t.Errorf("after apt purge: %s failed:\n%s", c, out)
		}
	}
}

// TestSlowKubelet: a node without graceful node shutdown (its kubelet is
// killed at shutdown and does not report NotReady) whose kubelet takes 30
// seconds after it starts to report the new boot, as a real one that
// waits for its container runtime: the Node still says Ready, with the old
// boot's ID, when kured-host starts on the new boot. The slot must not be
// released before the kubelet has reported the new boot (the auditor's
// CheckReleases: a release while the Node shows the boot the slot was
// taken in).
func TestSlowKubelet(t *testing.T) {
	ctx := scenario(t, 5*time.Minute)
	v := startVM(t, ctx, "vm-slow-kubelet")
	install(ctx, v)
	dropIn(ctx, v, "50-vmtest.toml", fastRecheck)
	enable(ctx, v)
	v.Must(ctx, `mkdir -p /etc/systemd/system/kubelet.service.d && cat >/etc/systemd/system/kubelet.service.d/50-slow.conf <<'EOF'
[Service]
KillSignal=SIGKILL
ExecStart=
ExecStart=/bin/sh -c 'sleep 30; exec /usr/local/bin/kubelet --kubeconfig /etc/kubernetes/kubelet.conf'
EOF
systemctl daemon-reload`)
	a, err := env.cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return n == v.Name }
	oldBoot := v.WaitUp(ctx, "")
	v.Must(ctx, "touch /run/reboot-required")
	v.waitFor(ctx, "the VM to reboot", func() bool { return v.Boots() >= 2 })
	v.WaitUp(ctx, oldBoot)
	waitFor(t, ctx, "the VM's slot released", func() bool {
		st, _, unsched := claimOf(t, ctx, v.Name)
		return st == "" && !unsched
	})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(limits); err != nil {
		t.Error(err)
		for _, s := range a.History() {
			if s.Node == v.Name {
				t.Logf("rv %d %s claim=%q phase=%q unschedulable=%v ready=%v boot=%.8s", s.RV, s.Seen.Format("15:04:05.000"), s.ClaimLabel, s.Claim.Phase, s.Unschedulable, s.Ready, s.BootID)
			}
		}
	}
	if out := v.Must(ctx, "journalctl -b -u kured-host --no-pager -o cat | grep -m1 'has not reported this boot yet' || true"); out != "" {
		t.Logf("kured-host in the new boot: %s", strings.TrimSpace(out))
	} else {
		t.Errorf("kured-host did not say it waited for the kubelet to report the new boot")
	}
}
