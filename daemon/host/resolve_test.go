package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestResolve: links are followed inside the root, absolute ones from the
// root, and nothing leads out of it.
func TestResolve(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"var/lib/kubelet/pki", "run", "etc"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(root, "var/lib/kubelet/pki/cert-1.pem"), nil, 0o600))
	must(t, os.WriteFile(filepath.Join(root, "etc/passwd"), nil, 0o644))
	link := func(target, at string) { must(t, os.Symlink(target, filepath.Join(root, at))) }
	link("/var/lib/kubelet/pki/cert-1.pem", "var/lib/kubelet/pki/current.pem") // absolute, as the kubelet writes it
	link("../run", "var/run")                                                  // relative
	link("/../../../../etc", "var/up")                                         // tries to climb out
	link("loop-b", "var/loop-a")
	link("loop-a", "var/loop-b")

	tests := []struct {
		p, want string
		err     error
	}{
		{"/var/lib/kubelet/pki/current.pem", "var/lib/kubelet/pki/cert-1.pem", nil},
		{"/var/run", "run", nil},
		{"/var/up/passwd", "etc/passwd", nil},
		{"/../../etc/passwd", "etc/passwd", nil},
		{"/var/loop-a", "", syscall.ELOOP},
		{"/var/missing", "", fs.ErrNotExist},
		{"/etc/passwd/x", "", syscall.ENOTDIR},
	}
	for _, tt := range tests {
		got, err := Root(root).Resolve(tt.p, nil)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%s: got %q, %v; want %v", tt.p, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != filepath.Join(root, tt.want) {
			t.Errorf("%s: got %q, %v; want %q", tt.p, got, err, filepath.Join(root, tt.want))
		}
	}
	var visited []string
	if _, err := Root(root).Resolve("/var/lib/kubelet/pki/current.pem", func(p string, _ fs.FileInfo) error {
		visited = append(visited, strings.TrimPrefix(p, root))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"", "/var", "/var/lib", "/var/lib/kubelet", "/var/lib/kubelet/pki", "/var", "/var/lib", "/var/lib/kubelet", "/var/lib/kubelet/pki", "/var/lib/kubelet/pki/cert-1.pem"}
	if strings.Join(visited, " ") != strings.Join(want, " ") {
		t.Errorf("visited %q, want %q", visited, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
