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

// TestResolveVisitStops: an error from visit ends the lookup where it is
// returned, the root's included, and a root that cannot be read is
// visited not at all.
func TestResolveVisitStops(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "var/lib"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "var/lib/f"), nil, 0o600))
	must(t, os.Symlink("/var/lib/f", filepath.Join(root, "var/link")))
	errStop := errors.New("stop")
	tests := []struct {
		name, root, stop string
		visited          []string
		err              error
	}{
		{"at the root", root, "", []string{""}, errStop},
		{"at a directory, after the link", root, "/var/lib", []string{"", "/var", "/var", "/var/lib"}, errStop},
		{"at the file", root, "/var/lib/f", []string{"", "/var", "/var", "/var/lib", "/var/lib/f"}, errStop},
		{"a root that is missing", filepath.Join(root, "missing"), "", nil, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var visited []string
			_, err := Root(tt.root).Resolve("/var/link", func(p string, _ fs.FileInfo) error {
				p = strings.TrimPrefix(p, root)
				visited = append(visited, p)
				if p == tt.stop {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, tt.err) || strings.Join(visited, " ") != strings.Join(tt.visited, " ") {
				t.Errorf("visited %q, error %v; want %q, %v", visited, err, tt.visited, tt.err)
			}
		})
	}
	if got, err := Root("").Resolve("/", nil); got != "/" || err != nil {
		t.Errorf(`the empty root: got %q, %v; want "/"`, got, err)
	}
}
