package host

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// CommandRebooter reboots by running a command (reboot.method =
// "command"), an argv without a shell.
type CommandRebooter struct {
	Argv []string
}

// Reboot runs the command and fails if it does not exit 0 within a minute.
func (c CommandRebooter) Reboot(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("reboot command %q: %v: %s", strings.Join(c.Argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
