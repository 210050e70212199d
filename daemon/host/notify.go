// Package host is kured-host's side of the machine it runs on: systemd
// notifications, logind over D-Bus (reboot, inhibitors), the boot ID, and
// the root under which the host's paths are found.
package host

import (
	"fmt"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// Systemd sends sd_notify messages (READY=1, STATUS=..., STOPPING=1) to the
// socket in $NOTIFY_SOCKET. Outside systemd there is no socket and Notify
// does nothing.
type Systemd struct{}

// Notify sends one state message.
func (Systemd) Notify(state string) error {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("sd_notify %q: %w", state, err)
	}
	return nil
}

// WatchdogInterval is systemd's WatchdogSec for this service, or 0 when
// the watchdog is off.
func WatchdogInterval() time.Duration {
	d, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d
}
