// Package vmtest installs the real .deb in a real Debian VM (systemd,
// logind, D-Bus, a real reboot) and runs it against the cluster harness's
// API server: `make test-vm`. See test/vm/README.md.
//
// It runs only when KURED_HOST_VM=1 (plain `go test ./...` skips it), as
// root, with qemu, and with the image and the packages that `make
// test-vm` prepares. The test process re-executes itself inside a network
// namespace of its own, where a tap device (10.0.0.1) links it to the VM
// (10.0.0.2): the API server, the VM and everything they say stay there.
package vmtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kured-host/kured-host/test/cluster"
)

// The environment: what `make test-vm` sets, and what the test passes to
// itself inside the network namespace.
const (
	enableEnv = "KURED_HOST_VM"       // "1": run the VM tests
	imageEnv  = "KURED_HOST_VM_IMAGE" // the image directory (test/vm/image.sh prints it)
	debsEnv   = "KURED_HOST_VM_DEBS"  // kured-host_*_amd64.deb, and upgrade/ with a newer one
	accelEnv  = "KURED_HOST_VM_ACCEL" // "kvm" or "tcg"; default: kvm when it works
	runEnv    = "KURED_HOST_VM_RUN"   // (inside) the run directory
	netnsEnv  = "KURED_HOST_VM_NETNS" // (inside) the network namespace
)

// The VM's network: a tap device in the namespace, with no way out.
const (
	hostIP  = "10.0.0.1" // the namespace's end, where the API server is served
	guestIP = "10.0.0.2" // the VM (test/vm/guest/etc/systemd/network/10-tap.network)
	tapName = "tap0"
)

// env is the run, inside the network namespace.
var env struct {
	cp    *cluster.ControlPlane
	run   string // the run directory: binaries, backing disk, one directory per test
	image string // kernel and initramfs
	debs  string
	accel string
	bin   string // the product's binary, for the simulated peers
	guest string // kured-host-vm-guest, for the VM's share
	disk  string // the image's disk, the overlays' backing file
}

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(enableEnv) != "1":
		os.Exit(m.Run()) // every test skips
	case os.Getenv(netnsEnv) == "":
		os.Exit(outside())
	default:
		os.Exit(inside(m))
	}
}

// skipUnlessEnabled skips a test of a plain `go test ./...`.
func skipUnlessEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("a VM test: run `make test-vm` (or set %s=1 with %s and %s)", enableEnv, imageEnv, debsEnv)
	}
}

// outside prepares the run (binaries, disk, namespace), runs the tests in
// a copy of this process inside the namespace, and cleans up. Logs of
// failed tests are kept.
func outside() int {
	unlock, err := oneVMAtATime()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		return 1
	}
	defer unlock()
	run, err := os.MkdirTemp("", "kured-host-vm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		return 1
	}
	accel, err := prepare(run)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		_ = os.RemoveAll(run)
		return 1
	}
	ns := fmt.Sprintf("kured-host-vm-%d", os.Getpid())
	if err := createNetns(ns); err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		deleteNetns(ns)
		_ = os.RemoveAll(run)
		return 1
	}
	defer deleteNetns(ns)
	code := runInside(ns, run, accel)
	// The disk and the overlays are big and worth nothing after the run.
	_ = os.Remove(filepath.Join(run, "disk.raw"))
	matches, _ := filepath.Glob(filepath.Join(run, "*", "overlay.qcow2"))
	for _, f := range matches {
		_ = os.Remove(f)
	}
	if code == 0 {
		_ = os.RemoveAll(run)
	} else {
		fmt.Fprintf(os.Stderr, "vmtest: serial logs of the failed tests kept in %s\n", run)
	}
	return code
}

// lockPath serializes the VM tests of every checkout on the machine: two
// VMs at once would slow each other down past their timeouts.
const lockPath = "/run/lock/kured-host-vm.lock"

// oneVMAtATime waits until no other VM test runs on this machine.
func oneVMAtATime() (unlock func(), err error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "vmtest: another VM test is running (%s); waiting for it\n", lockPath)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() { f.Close() }, nil
}

// prepare checks the host, builds the guest program and the product's
// binary, and unpacks the disk, all into run.
func prepare(run string) (accel string, err error) {
	if os.Geteuid() != 0 {
		return "", errors.New("the VM tests need root (network namespace, tap device, qemu)")
	}
	for _, c := range []string{"qemu-system-x86_64", "qemu-img", "zstd", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			return "", fmt.Errorf("%s is missing: `make test-vm` installs it", c)
		}
	}
	image, debs := os.Getenv(imageEnv), os.Getenv(debsEnv)
	if image == "" || debs == "" {
		return "", fmt.Errorf("set %s (test/vm/image.sh prints it) and %s (the packages): `make test-vm` does", imageEnv, debsEnv)
	}
	if _, err := findDeb(debs); err != nil {
		return "", err
	}
	if _, err := findDeb(filepath.Join(debs, "upgrade")); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", filepath.Join(run, "kured-host-vm-guest"), "./guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the guest program: %v\n%s", err, out)
	}
	if _, err := cluster.BuildKuredHost(run); err != nil {
		return "", err
	}
	if err := buildKubelet(run); err != nil {
		return "", err
	}
	if err := writeImages(filepath.Join(run, "images"), filepath.Join(run, "kured-host-vm-guest")); err != nil {
		return "", fmt.Errorf("the container images: %w", err)
	}
	unzst := exec.Command("zstd", "-q", "-d", "--sparse", filepath.Join(image, "disk.raw.zst"), "-o", filepath.Join(run, "disk.raw"))
	if out, err := unzst.CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack the disk: %v\n%s", err, out)
	}
	// The overlays' backing file is never written.
	if err := os.Chmod(filepath.Join(run, "disk.raw"), 0o444); err != nil {
		return "", err
	}
	accel = os.Getenv(accelEnv)
	if accel == "" {
		accel = "tcg"
		if kvmWorks(image) {
			accel = "kvm"
		}
	}
	return accel, nil
}

// kvmWorks reports whether qemu runs a guest with KVM here: /dev/kvm can
// exist and create VMs whose CPUs never run (nested in some sandboxes), so
// the probe boots the image's kernel and waits up to 10 seconds for its
// first line on the serial console (well under a second with KVM).
func kvmWorks(image string) bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-machine", "q35", "-accel", "kvm", "-cpu", "host",
		"-m", "256", "-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio",
		"-kernel", filepath.Join(image, "vmlinuz"), "-append", "console=ttyS0 earlyprintk=ttyS0 panic=-1")
	out, err := cmd.StdoutPipe()
	if err != nil || cmd.Start() != nil {
		return false
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Linux version") {
			return true
		}
	}
	return false
}

// findDeb is the one kured-host .deb in dir.
func findDeb(dir string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "kured-host_*_amd64.deb"))
	if err != nil {
		return "", err
	}
	if len(m) != 1 {
		return "", fmt.Errorf("want one kured-host_*_amd64.deb in %s, found %d", dir, len(m))
	}
	return m[0], nil
}

// createNetns makes the namespace with its loopback up and the tap device
// the VM attaches to.
func createNetns(ns string) error {
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "tuntap", "add", "dev", tapName, "mode", "tap"},
		{"-n", ns, "addr", "add", hostIP + "/24", "dev", tapName},
		{"-n", ns, "link", "set", tapName, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func deleteNetns(ns string) {
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "vmtest: ip netns del %s: %v: %s", ns, err, out)
	}
}

// runInside runs this test binary again, with the same arguments, inside
// the namespace, and returns its exit status. It dies with this process.
func runInside(ns, run, accel string) int {
	args := append([]string{"netns", "exec", ns, os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), runEnv+"="+run, netnsEnv+"="+ns, accelEnv+"="+accel)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "vmtest:", err)
	return 1
}

// inside starts the control plane, served on the tap device's address,
// and runs the tests.
func inside(m *testing.M) int {
	env.run = os.Getenv(runEnv)
	env.image, env.debs, env.accel = os.Getenv(imageEnv), os.Getenv(debsEnv), os.Getenv(accelEnv)
	env.bin = filepath.Join(env.run, "kured-host")
	env.guest = filepath.Join(env.run, "kured-host-vm-guest")
	env.disk = filepath.Join(env.run, "disk.raw")
	var logw io.Writer
	if os.Getenv("CLUSTER_LOG") != "" {
		logw = os.Stderr
	}
	cp, err := cluster.Start(cluster.Options{ServeAddress: hostIP, Log: logw})
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		return 1
	}
	env.cp = cp
	fmt.Printf("vmtest: API server at %s for the VM, accelerator %s, run directory %s\n", cp.ServeURL, env.accel, env.run)
	code := m.Run()
	cp.Stop()
	return code
}
