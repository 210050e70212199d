// Package logindtest runs a private D-Bus daemon with stand-ins on it for
// systemd-logind, implementing the Manager methods kured-host uses
// (Reboot, ListInhibitors, CanReboot), and for systemd's Manager
// (GetUnitProcesses), for tests on a real bus.
package logindtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// Bus is a private dbus-daemon.
type Bus struct {
	Address string
	cmd     *exec.Cmd
}

const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
    <allow user="*"/>
  </policy>
</busconfig>
`

// StartBus runs dbus-daemon (from Debian's dbus package) on a socket in dir.
func StartBus(dir string) (*Bus, error) {
	cfg := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(busConfig, filepath.Join(dir, "bus"))), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+cfg, "--nofork", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start dbus-daemon: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case addr := <-line:
		if addr == "" {
			_ = cmd.Process.Kill()
			return nil, errors.New("dbus-daemon printed no address")
		}
		return &Bus{Address: addr, cmd: cmd}, nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		return nil, errors.New("dbus-daemon did not start")
	}
}

// Stop stops the daemon.
func (b *Bus) Stop() {
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
}

// Inhibitor is what ListInhibitors returns: a(ssssuu).
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// Logind is the stand-in, owning org.freedesktop.login1 on a bus.
type Logind struct {
	// Address is the bus it serves on.
	Address string
	conn    *dbus.Conn

	mu          sync.Mutex
	reboots     []bool // the interactive argument of each Reboot call
	inhibitors  []Inhibitor
	rebootError *dbus.Error
	canReboot   string
	onReboot    func()
}

// Serve connects to the bus and serves the Manager interface. onReboot,
// if set, is called (in its own goroutine) on each accepted Reboot.
func Serve(address string, onReboot func()) (*Logind, error) {
	conn, err := dbus.Connect(address)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", address, err)
	}
	l := &Logind{Address: address, conn: conn, onReboot: onReboot, canReboot: "yes"}
	if err := conn.Export(manager{l}, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"); err != nil {
		conn.Close()
		return nil, err
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("own org.freedesktop.login1: %v (reply %v)", err, reply)
	}
	return l, nil
}

// Close disconnects.
func (l *Logind) Close() error { return l.conn.Close() }

// Reboots returns the interactive argument of each Reboot call so far.
func (l *Logind) Reboots() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]bool(nil), l.reboots...)
}

// SetInhibitors sets what ListInhibitors returns.
func (l *Logind) SetInhibitors(in []Inhibitor) {
	l.mu.Lock()
	l.inhibitors = in
	l.mu.Unlock()
}

// FailReboots makes Reboot return this D-Bus error (nil: succeed).
func (l *Logind) FailReboots(name, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if name == "" {
		l.rebootError = nil
		return
	}
	l.rebootError = dbus.NewError(name, []any{message})
}

// SetCanReboot sets what CanReboot answers ("yes" at first).
func (l *Logind) SetCanReboot(answer string) {
	l.mu.Lock()
	l.canReboot = answer
	l.mu.Unlock()
}

// WaitReboot waits for the n-th Reboot call.
func (l *Logind) WaitReboot(ctx context.Context, n int) error {
	for len(l.Reboots()) < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// manager holds the exported methods only.
type manager struct{ l *Logind }

func (m manager) Reboot(interactive bool) *dbus.Error {
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	m.l.reboots = append(m.l.reboots, interactive)
	if m.l.rebootError != nil {
		return m.l.rebootError
	}
	if m.l.onReboot != nil {
		go m.l.onReboot()
	}
	return nil
}

func (m manager) ListInhibitors() ([]Inhibitor, *dbus.Error) {
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	return append([]Inhibitor(nil), m.l.inhibitors...), nil
}

func (m manager) CanReboot() (string, *dbus.Error) {
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	return m.l.canReboot, nil
}

// T is what Start and StartSystemd need of a test (testing.TB).
type T interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatal(args ...any)
}

// Start runs a private bus with the logind stand-in on it for the rest
// of the test; the stand-in's Address is the bus's.
func Start(t T) *Logind {
	t.Helper()
	bus := startBus(t)
	l, err := Serve(bus.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// StartSystemd runs a private bus with systemd's stand-in on it for the
// rest of the test; the stand-in's Address is the bus's.
func StartSystemd(t T) *Systemd {
	t.Helper()
	bus := startBus(t)
	s, err := ServeSystemd(bus.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func startBus(t T) *Bus {
	bus, err := StartBus(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Stop)
	return bus
}
