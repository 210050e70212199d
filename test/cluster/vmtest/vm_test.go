package vmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/test/cluster"
)

// agentPort is where kured-host-vm-guest's agent listens in the VM.
const agentPort = "7050"

// VM is one Debian VM: a throwaway overlay over the image, the test's
// read-only 9p share, and qemu started again on the same overlay each
// time the guest reboots (-no-reboot), as a machine would come back.
type VM struct {
	Name string // the node's name: the guest's host name
	Dir  string // this test's directory: overlay, share, serial logs
	t    *testing.T
	// realKubelet: the real kubelet and containerd run in the guest
	// (kubelet_test.go), not the stand-in.
	realKubelet bool

	mu       sync.Mutex
	boots    int // qemu runs so far: 1, then 2 after a reboot...
	proc     *os.Process
	stopping bool
	done     chan struct{} // closed when the machine is off for good
	ended    string        // why it is off

	client *http.Client
}

// startVM boots a VM for node name from a fresh overlay and waits until
// its agent answers and its kubelet stand-in has reported the Node Ready
// with this boot's ID. The VM is powered off, its Node deleted, and its
// directory removed (unless the test failed) when the test ends.
func startVM(t *testing.T, ctx context.Context, name string) *VM {
	t.Helper()
	return bootVM(t, ctx, name, false)
}

// startRealKubeletVM is startVM with the real kubelet and containerd in
// the guest, set up as kubeadm sets up a node.
func startRealKubeletVM(t *testing.T, ctx context.Context, name string) *VM {
	t.Helper()
	return bootVM(t, ctx, name, true)
}

func bootVM(t *testing.T, ctx context.Context, name string, realKubelet bool) *VM {
	t.Helper()
	dir := filepath.Join(env.run, strings.ReplaceAll(t.Name(), "/", "_"))
	v := &VM{Name: name, Dir: dir, t: t, realKubelet: realKubelet, done: make(chan struct{}), client: &http.Client{}}
	if err := v.prepare(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.PowerOff()
		err := env.cp.Admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("delete node %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("serial logs (boot-N.log) and qemu's output kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	began := time.Now()
	v.start()
	boot := v.WaitUp(ctx, "")
	t.Logf("%s: booted in %s (boot ID %s, %s)", name, time.Since(began).Round(100*time.Millisecond), boot, env.accel)
	return v
}

// prepare makes the overlay and the share: the packages, the guest
// program and the node's credentials.
func (v *VM) prepare() error {
	share := filepath.Join(v.Dir, "share")
	for _, d := range []string{"debs", "upgrade", "bin", "node"} {
		if err := os.MkdirAll(filepath.Join(share, d), 0o755); err != nil {
			return err
		}
	}
	deb, err := findDeb(env.debs)
	if err != nil {
		return err
	}
	upgrade, err := findDeb(filepath.Join(env.debs, "upgrade"))
	if err != nil {
		return err
	}
	for src, dst := range map[string]string{
		deb:       filepath.Join(share, "debs", filepath.Base(deb)),
		upgrade:   filepath.Join(share, "upgrade", filepath.Base(upgrade)),
		env.guest: filepath.Join(share, "bin", "kured-host-vm-guest"),
	} {
		if err := copyFile(src, dst); err != nil {
			return err
		}
	}
	if err := writeNodeCredentials(filepath.Join(share, "node"), v.Name); err != nil {
		return err
	}
	if v.realKubelet {
		if err := shareKubelet(share); err != nil {
			return err
		}
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", env.disk,
		filepath.Join(v.Dir, "overlay.qcow2")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img create: %v: %s", err, out)
	}
	return nil
}

func copyFile(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, st.Mode().Perm())
}

// writeNodeCredentials writes a kubeconfig shaped like kubeadm's
// kubelet.conf for system:node:<name>, with the client certificate and
// key in the file the kubelet keeps them in. The guest installs them at
// those paths before its kubelet stand-in starts.
func writeNodeCredentials(dir, name string) error {
	certPEM, keyPEM, err := env.cp.CA.ClientCert("system:node:"+name, []string{"system:nodes"}, 24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet-client-current.pem"), append(certPEM, keyPEM...), 0o600); err != nil {
		return err
	}
	const cert = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	return os.WriteFile(filepath.Join(dir, "kubelet.conf"), cluster.KubeletConf(env.cp.ServerCA, env.cp.ServeURL, cert), 0o600)
}

// start runs the machine: qemu, and qemu again after each reboot, until
// it powers off, crashes or is stopped.
func (v *VM) start() {
	go func() {
		defer close(v.done)
		for {
			v.mu.Lock()
			v.boots++
			n := v.boots
			v.mu.Unlock()
			err := v.qemu(n)
			serial := v.Serial(n)
			v.mu.Lock()
			stopping := v.stopping
			v.mu.Unlock()
			switch {
			case err != nil:
				v.ended = fmt.Sprintf("qemu (boot %d): %v", n, err)
			case stopping:
				v.ended = "stopped by the test"
			case strings.Contains(serial, "reboot: Restarting system"):
				continue // the guest rebooted: the machine comes back
			case strings.Contains(serial, "reboot: Power down"):
				v.ended = "powered off"
			case strings.Contains(serial, "Kernel panic"):
				v.ended = fmt.Sprintf("the guest's kernel panicked (boot %d): %s; its console is %s", n, panicLine(serial), v.serialPath(n))
			default:
				v.ended = fmt.Sprintf("qemu ended without a reboot or power-off (boot %d)", n)
			}
			return
		}
	}()
}

// qemu runs boot n until qemu exits.
func (v *VM) qemu(n int) error {
	cpu := "max"
	if env.accel == "kvm" {
		cpu = "host"
	}
	mem := "1024"
	if v.realKubelet {
		mem = "2048" // the kubelet, containerd and a pod beside kured-host
	}
	args := []string{
		"-machine", "q35", "-accel", env.accel, "-cpu", cpu, "-smp", "2", "-m", mem,
		"-nodefaults", "-display", "none", "-no-reboot",
		"-serial", "file:" + v.serialPath(n),
		"-kernel", filepath.Join(env.image, "vmlinuz"), "-initrd", filepath.Join(env.image, "initrd.img"),
		// softlockup_panic: a CPU stuck in the kernel ends the boot at
		// once, with the stuck code's backtrace on the console. Under
		// TCG, one CI run's guest had PID 1 stuck on CPU 0 from 6 s
		// into its boot until the test's time-out, 15 minutes later,
		// and the console, kept quiet, said nowhere.
		"-append", "root=/dev/vda rw console=ttyS0 panic=-1 softlockup_panic=1 quiet systemd.hostname=" + v.Name,
		"-drive", "file=" + filepath.Join(v.Dir, "overlay.qcow2") + ",if=virtio,format=qcow2,cache=unsafe",
		"-device", "virtio-rng-pci",
		"-netdev", "tap,id=net0,ifname=" + tapName + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=net0",
		"-virtfs", "local,path=" + filepath.Join(v.Dir, "share") + ",mount_tag=share,security_model=none,readonly=on",
	}
	out, err := os.Create(filepath.Join(v.Dir, fmt.Sprintf("qemu-%d.log", n)))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("qemu-system-x86_64", args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	v.mu.Lock()
	v.proc = cmd.Process
	v.mu.Unlock()
	err = cmd.Wait()
	v.mu.Lock()
	v.proc = nil
	v.mu.Unlock()
	return err
}

// panicLine is the kernel's panic message in a console log.
func panicLine(serial string) string {
	i := strings.Index(serial, "Kernel panic")
	line, _, _ := strings.Cut(serial[i:], "\n")
	return strings.TrimSpace(line)
}

func (v *VM) serialPath(n int) string { return filepath.Join(v.Dir, fmt.Sprintf("boot-%d.log", n)) }

// Serial is the serial console's log of boot n (the kernel, and the
// journal, which the image forwards to the console).
func (v *VM) Serial(n int) string {
	b, _ := os.ReadFile(v.serialPath(n))
	return string(b)
}

// Boots is the number of times the machine has started: 2 after one
// reboot.
func (v *VM) Boots() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.boots
}

// Off reports whether the machine is off for good, and why.
func (v *VM) Off() (bool, string) {
	select {
	case <-v.done:
		return true, v.ended
	default:
		return false, ""
	}
}

// PowerOff shuts the guest down cleanly (a minute at most), else stops
// qemu.
func (v *VM) PowerOff() {
	v.mu.Lock()
	v.stopping = true
	v.mu.Unlock()
	if off, _ := v.Off(); off {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _ = v.Run(ctx, "systemctl --no-block poweroff")
	cancel()
	select {
	case <-v.done:
		return
	case <-time.After(time.Minute):
	}
	v.mu.Lock()
	if v.proc != nil {
		_ = v.proc.Kill()
	}
	v.mu.Unlock()
	<-v.done
}

// Result is what a command run in the guest gave.
type Result struct {
	Code   int    `json:"code"`
	Output string `json:"output"`
}

// Run runs a shell command as root in the guest, through its agent.
func (v *VM) Run(ctx context.Context, cmd string) (Result, error) {
	var res Result
	timeout := 2 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	body, err := json.Marshal(map[string]any{"cmd": cmd, "timeout_seconds": int(timeout.Seconds()) + 1})
	if err != nil {
		return res, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+guestIP+":"+agentPort+"/run", bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return res, fmt.Errorf("agent: %s: %s", resp.Status, b)
	}
	err = json.NewDecoder(resp.Body).Decode(&res)
	return res, err
}

// Poll runs a short command in the guest, for polling: it gives up after
// 15 seconds (a guest going down for a reboot never answers).
func (v *VM) Poll(ctx context.Context, cmd string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return v.Run(ctx, cmd)
}

// Must runs cmd in the guest and fails the test unless it exits 0; it
// returns the output.
func (v *VM) Must(ctx context.Context, cmd string) string {
	v.t.Helper()
	res, err := v.Run(ctx, cmd)
	if err != nil {
		v.t.Fatalf("%s: %s: %v", v.Name, cmd, err)
	}
	if res.Code != 0 {
		v.t.Fatalf("%s: %s: exit status %d:\n%s", v.Name, cmd, res.Code, res.Output)
	}
	return res.Output
}

// Exit runs cmd in the guest and returns its exit status and output,
// failing the test only if it could not be run.
func (v *VM) Exit(ctx context.Context, cmd string) (int, string) {
	v.t.Helper()
	res, err := v.Run(ctx, cmd)
	if err != nil {
		v.t.Fatalf("%s: %s: %v", v.Name, cmd, err)
	}
	return res.Code, res.Output
}

// bootID asks the agent for the running boot's ID.
func (v *VM) bootID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+guestIP+":"+agentPort+"/boot", nil)
	if err != nil {
		return "", err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// WaitUp waits until the guest's agent answers from a boot other than
// notBoot and the Node is Ready with that boot's ID; it returns the boot
// ID.
func (v *VM) WaitUp(ctx context.Context, notBoot string) string {
	v.t.Helper()
	var boot string
	v.waitFor(ctx, "the guest's agent", func() bool {
		id, err := v.bootID(ctx)
		if err == nil && id != "" && id != notBoot {
			boot = id
			return true
		}
		return false
	})
	v.waitFor(ctx, "the Node Ready with boot ID "+boot, func() bool {
		n, err := env.cp.Admin.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
		return err == nil && cluster.NodeReady(n) && n.Status.NodeInfo.BootID == boot
	})
	return boot
}

// waitFor polls cond every 250ms until it holds; it fails the test when
// ctx ends or the machine is off for good.
func (v *VM) waitFor(ctx context.Context, what string, cond func() bool) {
	v.t.Helper()
	for !cond() {
		if off, why := v.Off(); off {
			v.t.Fatalf("%s: waiting for %s: the VM is off: %s\n%s", v.Name, what, why, tail(v.Serial(v.Boots()), 3000))
		}
		select {
		case <-ctx.Done():
			v.t.Fatalf("%s: waiting for %s: %v\nserial console, boot %d:\n%s", v.Name, what, ctx.Err(), v.Boots(), tail(v.Serial(v.Boots()), 3000))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Excerpt is the lines of the serial log of boot n that match re.
func (v *VM) Excerpt(n int, re *regexp.Regexp) []string {
	var out []string
	for _, l := range strings.Split(v.Serial(n), "\n") {
		l = strings.TrimRight(l, "\r")
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
