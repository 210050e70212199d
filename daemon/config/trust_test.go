package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestTrust loads a configuration whose files and directories have
// various owners and modes. It runs as root and as any other user: the
// owner required is the test's own user, which stands for root.
func TestTrust(t *testing.T) {
	me := uint32(os.Getuid())
	enforce := Trust{Enforce: true, Owner: me}
	type tree struct {
		top, main, dropInDir, dropIn fs.FileMode
	}
	good := tree{top: 0o755, main: 0o640, dropInDir: 0o755, dropIn: 0o644}
	tests := []struct {
		name  string
		trust Trust
		tree  func(tree) tree
		setup func(t *testing.T, top string)
		// want: substrings of the error, in order, each naming its path
		// relative to the top directory; none: loads.
		want []string
	}{
		{"root's files", enforce, nil, nil, nil},
		{"world-writable main file", enforce, func(tr tree) tree { tr.main = 0o646; return tr }, nil,
			[]string{"config.toml: refused: it is writable by others (mode 0646)", "chmod go-w "}},
		{"group-writable main file", enforce, func(tr tree) tree { tr.main = 0o660; return tr }, nil,
			[]string{"config.toml: refused: it is writable by its group (mode 0660)"}},
		{"0666 drop-in in a 0777 config.d", enforce, func(tr tree) tree { tr.dropInDir, tr.dropIn = 0o777, 0o666; return tr }, nil,
			[]string{"config.d: refused: it is writable by its group and others (mode 0777)"}},
		{"0666 drop-in", enforce, func(tr tree) tree { tr.dropIn = 0o666; return tr }, nil,
			[]string{"config.d/50-commands.toml: refused: it is writable by its group and others (mode 0666)"}},
		{"writable directory of the main file", enforce, func(tr tree) tree { tr.top = 0o777; return tr }, nil,
			[]string{"etc: refused: it is writable by its group and others (mode 0777)"}},
		{"sticky directory of the main file (/tmp)", enforce, func(tr tree) tree { tr.top = 0o777 | fs.ModeSticky; return tr }, nil, nil},
		{"not the owner", Trust{Enforce: true, Owner: me + 1}, nil, nil,
			[]string{"etc: refused: it is owned by uid ", "config.toml: refused: it is owned by uid ", "config.d: refused: it is owned by uid "}},
		{"not enforced (not root)", Trust{}, func(tr tree) tree { tr.main, tr.dropInDir, tr.dropIn = 0o666, 0o777, 0o666; return tr }, nil, nil},
		{"symlinked main file: the target is checked", enforce, nil, func(t *testing.T, top string) {
			target := filepath.Join(filepath.Dir(top), "elsewhere.toml")
			mustWrite(t, target, "", 0o666)
			main := filepath.Join(top, "config.toml")
			if err := os.Remove(main); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, main); err != nil {
				t.Fatal(err)
			}
		}, []string{"config.toml: refused: it is a symlink to ", "elsewhere.toml, which is writable by its group and others (mode 0666)", "chmod go-w "}},
		{"a FIFO drop-in is refused, not waited on", enforce, nil, func(t *testing.T, top string) {
			if err := syscall.Mkfifo(filepath.Join(top, "config.d", "60-fifo.toml"), 0o600); err != nil {
				t.Skip("no FIFO:", err)
			}
		}, []string{"config.d/60-fifo.toml: not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := good
			if tt.tree != nil {
				tr = tt.tree(tr)
			}
			top := filepath.Join(t.TempDir(), "etc")
			main := filepath.Join(top, "config.toml")
			mustWrite(t, main, "[lock]\nconcurrency = 2\n", tr.main)
			mustWrite(t, filepath.Join(top, "config.d", "50-commands.toml"), "[health]\ncommand = [\"/usr/local/bin/healthy\"]\n", tr.dropIn)
			mustChmod(t, filepath.Join(top, "config.d"), tr.dropInDir)
			if tt.setup != nil {
				tt.setup(t, top)
			}
			mustChmod(t, top, tr.top)
			l, err := Load(main, tt.trust)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(l.Config.Health.Command) != 1 || l.Config.Lock.Concurrency != 2 {
					t.Errorf("the drop-in or the main file was not read: %+v", l.Files)
				}
				return
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Load = %v, want a configuration error", err)
			}
			msg := strings.ReplaceAll(err.Error(), top, "etc")
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error lacks %q (in order):\n%s", w, msg)
				}
				rest = rest[i+len(w):]
			}
			if strings.Contains(msg, "/usr/local/bin/healthy") {
				t.Errorf("the refused file's content shows in the error:\n%s", msg)
			}
		})
	}
}

// TestTrustRefusesAnotherOwnersDropIn needs root to give a file away.
func TestTrustRefusesAnotherOwnersDropIn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a file")
	}
	top := t.TempDir()
	main := filepath.Join(top, "config.toml")
	mustWrite(t, main, "", 0o644)
	dropIn := filepath.Join(top, "config.d", "50-x.toml")
	mustWrite(t, dropIn, "[health]\ncommand = [\"/tmp/x\"]\n", 0o644)
	if err := os.Chown(dropIn, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Load(main, TrustFor(0))
	if err == nil || !strings.Contains(err.Error(), dropIn+": refused: it is owned by uid 65534, not root") ||
		!strings.Contains(err.Error(), "chown root "+dropIn) {
		t.Errorf("Load = %v", err)
	}
}

func TestTrustFor(t *testing.T) {
	if !TrustFor(0).Enforce || TrustFor(0).Owner != 0 || TrustFor(1000).Enforce {
		t.Errorf("TrustFor(0) = %+v, TrustFor(1000) = %+v", TrustFor(0), TrustFor(1000))
	}
}

func mustWrite(t *testing.T, path, body string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	mustChmod(t, path, mode)
}

func mustChmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
