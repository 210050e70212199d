package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
)

// systemd's names on the system bus.
const (
	SystemdService   = "org.freedesktop.systemd1"
	SystemdPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	SystemdInterface = "org.freedesktop.systemd1.Manager"
	// errNoSuchUnit is systemd's answer for a unit it does not know.
	errNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

// UnitProcess is one process of a systemd unit, as PID 1 reports it.
type UnitProcess struct {
	PID  uint32
	Argv []string
}

// Units asks systemd (PID 1) over D-Bus about the processes of its
// units. Only PID 1 puts a process into a unit's control group, and a
// process in it is a child of the unit's own: what it reports about
// kubelet.service cannot be forged by another local user, unlike a
// process's name in /proc.
type Units struct {
	Address string // "" for the system bus
}

// Processes lists the processes of unit with their command lines; none
// when the unit is unknown or not running.
func (u Units) Processes(ctx context.Context, unit string) ([]UnitProcess, error) {
	var conn *dbus.Conn
	var err error
	if u.Address == "" {
		conn, err = dbus.ConnectSystemBus(dbus.WithContext(ctx))
	} else {
		conn, err = dbus.Connect(u.Address, dbus.WithContext(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus: %w", err)
	}
	defer conn.Close()
	var raw []struct {
		Cgroup  string
		PID     uint32
		Cmdline string
	}
	call := conn.Object(SystemdService, SystemdPath).CallWithContext(ctx, SystemdInterface+".GetUnitProcesses", 0, unit)
	if err := call.Store(&raw); err != nil {
		var derr dbus.Error
		if errors.As(err, &derr) && derr.Name == errNoSuchUnit {
			return nil, nil
		}
		return nil, fmt.Errorf("ask systemd for the processes of %s: %w", unit, err)
	}
	out := make([]UnitProcess, 0, len(raw))
	for _, p := range raw {
		argv, err := SplitCommandLine(p.Cmdline)
		if err != nil {
			continue // a kernel thread's "[name]", or a form this build does not read
		}
		out = append(out, UnitProcess{PID: p.PID, Argv: argv})
	}
	return out, nil
}

// SplitCommandLine splits a command line as systemd writes it in
// GetUnitProcesses: arguments separated by spaces, each either bare or
// quoted as a shell would read it ("…" with backslash escapes, '…', or
// $'…' with C escapes), depending on systemd's version. It fails on
// anything else rather than guess.
func SplitCommandLine(s string) ([]string, error) {
	var argv []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		var b strings.Builder
		for i < len(s) && s[i] != ' ' {
			var err error
			switch {
			case strings.HasPrefix(s[i:], "$'"):
				i, err = cQuoted(s, i+2, &b)
			case s[i] == '\'':
				end := strings.IndexByte(s[i+1:], '\'')
				if end < 0 {
					return nil, fmt.Errorf("unterminated quote in %q", s)
				}
				b.WriteString(s[i+1 : i+1+end])
				i += end + 2
			case s[i] == '"':
				i, err = doubleQuoted(s, i+1, &b)
			case s[i] == '\\' && i+1 < len(s):
				b.WriteByte(s[i+1])
				i += 2
			default:
				b.WriteByte(s[i])
				i++
			}
			if err != nil {
				return nil, err
			}
		}
		argv = append(argv, b.String())
	}
	if len(argv) == 0 || !utf8.ValidString(argv[0]) || strings.HasPrefix(argv[0], "[") {
		return nil, fmt.Errorf("no command line in %q", s)
	}
	return argv, nil
}

// doubleQuoted reads "…" from just after the opening quote.
func doubleQuoted(s string, i int, b *strings.Builder) (int, error) {
	for i < len(s) {
		switch c := s[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\`$\n", s[i+1]) >= 0:
			b.WriteByte(s[i+1])
			i += 2
		default:
			b.WriteByte(c)
			i++
		}
	}
	return 0, fmt.Errorf("unterminated quote in %q", s)
}

// cQuoted reads $'…' from just after the opening quote.
func cQuoted(s string, i int, b *strings.Builder) (int, error) {
	simple := map[byte]byte{'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v', '\\': '\\', '\'': '\'', '"': '"'}
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\'':
			return i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			i++
		case i+1 < len(s) && simple[s[i+1]] != 0:
			b.WriteByte(simple[s[i+1]])
			i += 2
		case i+3 < len(s) && s[i+1] == 'x':
			v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
			if err != nil {
				return 0, fmt.Errorf("bad escape in %q", s)
			}
			b.WriteByte(byte(v))
			i += 4
		default:
			return 0, fmt.Errorf("bad escape in %q", s)
		}
	}
	return 0, fmt.Errorf("unterminated quote in %q", s)
}
