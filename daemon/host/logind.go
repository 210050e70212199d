package host

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// logind's names on the system bus.
const (
	LogindService   = "org.freedesktop.login1"
	LogindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	LogindInterface = "org.freedesktop.login1.Manager"
)

// Logind calls systemd-logind over D-Bus. It calls Manager.Reboot itself
// and looks at the error: go-systemd's login1.Conn.Reboot drops it, so a
// refused reboot would go unnoticed.
type Logind struct {
	conn *dbus.Conn
}

// DialLogind connects to the bus at address, or to the system bus
// ($DBUS_SYSTEM_BUS_ADDRESS or the standard socket) when address is empty.
func DialLogind(ctx context.Context, address string) (*Logind, error) {
	var conn *dbus.Conn
	var err error
	if address == "" {
		conn, err = dbus.ConnectSystemBus(dbus.WithContext(ctx))
	} else {
		conn, err = dbus.Connect(address, dbus.WithContext(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus: %w", err)
	}
	return &Logind{conn: conn}, nil
}

// Close closes the connection.
func (l *Logind) Close() error { return l.conn.Close() }

func (l *Logind) manager() dbus.BusObject { return l.conn.Object(LogindService, LogindPath) }

// Reboot asks logind to reboot the machine now (not interactive: no
// polkit prompt).
func (l *Logind) Reboot(ctx context.Context) error {
	if err := l.manager().CallWithContext(ctx, LogindInterface+".Reboot", 0, false).Err; err != nil {
		return fmt.Errorf("logind Reboot: %w", err)
	}
	return nil
}

// Inhibitor is one logind inhibitor lock.
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

func (i Inhibitor) String() string {
	return fmt.Sprintf("%s (pid %d): %s", i.Who, i.PID, i.Why)
}

// Inhibitors lists logind's inhibitor locks.
func (l *Logind) Inhibitors(ctx context.Context) ([]Inhibitor, error) {
	var out []Inhibitor
	if err := l.manager().CallWithContext(ctx, LogindInterface+".ListInhibitors", 0).Store(&out); err != nil {
		return nil, fmt.Errorf("logind ListInhibitors: %w", err)
	}
	return out, nil
}

// BlockingShutdown are the inhibitors that block (not delay) shutdown,
// such as a package manager at work.
func BlockingShutdown(all []Inhibitor) []Inhibitor {
	var out []Inhibitor
	for _, i := range all {
		if i.Mode == "block" && strings.Contains(":"+i.What+":", ":shutdown:") {
			out = append(out, i)
		}
	}
	return out
}

// BusLogind is logind on a bus dialled when first needed and again after a
// failure, so that a daemon started before D-Bus, or outliving a D-Bus
// restart, keeps working.
type BusLogind struct {
	Address string // "" for the system bus

	mu sync.Mutex
	l  *Logind
}

func (b *BusLogind) conn(ctx context.Context) (*Logind, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.l != nil {
		return b.l, nil
	}
	l, err := DialLogind(ctx, b.Address)
	if err != nil {
		return nil, err
	}
	b.l = l
	return l, nil
}

func (b *BusLogind) drop(l *Logind) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.l == l {
		_ = l.Close()
		b.l = nil
	}
}

// Reboot implements the daemon's Rebooter.
func (b *BusLogind) Reboot(ctx context.Context) error {
	l, err := b.conn(ctx)
	if err != nil {
		return err
	}
	if err := l.Reboot(ctx); err != nil {
		b.drop(l)
		return err
	}
	return nil
}

// Inhibitors lists logind's inhibitors.
func (b *BusLogind) Inhibitors(ctx context.Context) ([]Inhibitor, error) {
	l, err := b.conn(ctx)
	if err != nil {
		return nil, err
	}
	in, err := l.Inhibitors(ctx)
	if err != nil {
		b.drop(l)
	}
	return in, err
}
