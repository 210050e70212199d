package host

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBootID(t *testing.T) {
	// The real one.
	id, err := Root("/").BootID()
	if err != nil || len(id) != 36 {
		t.Errorf("boot ID of this machine: %q, %v", id, err)
	}
	// Under a root.
	root := t.TempDir()
	p := filepath.Join(root, BootIDPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("0d5c7d4e-aaaa-bbbb-cccc-123456789abc\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if id, err := Root(root).BootID(); err != nil || id != "0d5c7d4e-aaaa-bbbb-cccc-123456789abc" {
		t.Errorf("boot ID under %s: %q, %v", root, id, err)
	}
	if _, err := Root(t.TempDir()).BootID(); err == nil {
		t.Error("no error for a missing boot_id")
	}
	if got := Root("").Path("/run/x"); got != "/run/x" {
		t.Errorf("empty root: %s", got)
	}
}
