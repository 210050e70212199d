package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BootIDPath is where the kernel publishes the current boot's ID.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// Root prefixes the host's paths: "/" on the host itself, the host's file
// system mounted elsewhere in a container, or a test's directory (as
// node_exporter's --path.rootfs).
type Root string

// Path returns p inside the root.
func (r Root) Path(p string) string {
	if r == "" || r == "/" {
		return p
	}
	return filepath.Join(string(r), p)
}

// BootID reads the current boot's ID.
func (r Root) BootID() (string, error) {
	b, err := os.ReadFile(r.Path(BootIDPath))
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("read boot ID: %s is empty", r.Path(BootIDPath))
	}
	return id, nil
}
