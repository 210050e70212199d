package logindtest

import (
	"fmt"
	"sync"

	"github.com/godbus/dbus/v5"
)

// Process is one entry of GetUnitProcesses: a(sus), the control group,
// the PID and the command line as systemd writes it.
type Process struct {
	Cgroup  string
	PID     uint32
	Cmdline string
}

// Systemd is a stand-in for systemd's Manager on a bus, answering
// GetUnitProcesses from what the test sets.
type Systemd struct {
	// Address is the bus it serves on.
	Address string
	conn    *dbus.Conn

	mu    sync.Mutex
	units map[string][]Process
	asked []string
}

// ServeSystemd connects to the bus and owns org.freedesktop.systemd1.
func ServeSystemd(address string) (*Systemd, error) {
	conn, err := dbus.Connect(address)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", address, err)
	}
	s := &Systemd{Address: address, conn: conn, units: map[string][]Process{}}
	if err := conn.Export(systemdManager{s}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		conn.Close()
		return nil, err
	}
	reply, err := conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("own org.freedesktop.systemd1: %v (reply %v)", err, reply)
	}
	return s, nil
}

// Close disconnects.
func (s *Systemd) Close() error { return s.conn.Close() }

// SetUnit makes unit known, running procs (none: loaded, not running).
func (s *Systemd) SetUnit(unit string, procs ...Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.units[unit] = procs
}

// Asked lists the units asked about so far.
func (s *Systemd) Asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

type systemdManager struct{ s *Systemd }

func (m systemdManager) GetUnitProcesses(unit string) ([]Process, *dbus.Error) {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.s.asked = append(m.s.asked, unit)
	procs, ok := m.s.units[unit]
	if !ok {
		return nil, dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + unit + " not loaded."})
	}
	return append([]Process(nil), procs...), nil
}
