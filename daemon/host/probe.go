package host

import (
	"context"
	"fmt"
)

// Present reports whether logind's name has an owner on the bus.
func (l *Logind) Present(ctx context.Context) (bool, error) {
	var has bool
	if err := l.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, LogindService).Store(&has); err != nil {
		return false, fmt.Errorf("ask the bus for %s: %w", LogindService, err)
	}
	return has, nil
}

// CanReboot asks logind whether this caller may reboot: "yes", "no",
// "challenge" (only after authentication) or "na".
func (l *Logind) CanReboot(ctx context.Context) (string, error) {
	var answer string
	if err := l.manager().CallWithContext(ctx, LogindInterface+".CanReboot", 0).Store(&answer); err != nil {
		return "", fmt.Errorf("logind CanReboot: %w", err)
	}
	return answer, nil
}
