package sentinel

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCommand(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		codes   []int
		timeout time.Duration
		want    bool
		err     bool
	}{
		{"exit 0 means reboot (kured)", []string{"true"}, []int{0}, time.Second, true, false},
		{"exit 0 means no reboot", []string{"true"}, []int{1}, time.Second, false, false},
		{"needs-restarting -r style", []string{"sh", "-c", "exit 1"}, []int{1}, time.Second, true, false},
		{"zypper needs-rebooting style", []string{"sh", "-c", "exit 102"}, []int{102}, time.Second, true, false},
		{"other exit code", []string{"sh", "-c", "exit 2"}, []int{1}, time.Second, false, false},
		{"missing program", []string{"/nonexistent/needs-restarting", "-r"}, []int{0, 1}, time.Second, false, true},
		{"timeout", []string{"sleep", "10"}, []int{0}, 200 * time.Millisecond, false, true},
		{"killed", []string{"sh", "-c", "kill -9 $$"}, []int{0}, time.Second, false, true},
		// The process left behind holds stdout open; the answer is the
		// exit code, without waiting for it (the test's bound below).
		{"a process left behind", []string{"sh", "-c", "sleep 10 & exit 1"}, []int{1}, 10 * time.Second, true, false},
		{"a process left behind, timeout", []string{"sh", "-c", "sleep 10 & sleep 10"}, []int{0}, 200 * time.Millisecond, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Now()
			got, err := Command{Argv: tt.argv, RebootCodes: tt.codes, Timeout: tt.timeout}.RebootRequired(context.Background())
			if got != tt.want || (err != nil) != tt.err || (err != nil && !errors.Is(err, ErrCommand)) {
				t.Errorf("got %v, %v; want %v, error %v", got, err, tt.want, tt.err)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("returned after %s: it waited for a process left behind", took)
			}
		})
	}
}

// watcher runs Watch on c and returns the reports as they come.
func watcher(t *testing.T, c Checker, period time.Duration) <-chan bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := make(chan bool, 100)
	go Watch(ctx, c, period, slog.New(slog.NewTextHandler(io.Discard, nil)), func(needed bool, err error) {
		if err != nil {
			t.Errorf("report error: %v", err)
		}
		ch <- needed
	})
	return ch
}

// await waits for a report of want and returns how long it took.
func await(t *testing.T, ch <-chan bool, want bool) time.Duration {
	t.Helper()
	began := time.Now()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == want {
				return time.Since(began)
			}
		case <-timeout:
			t.Fatalf("no report of %v", want)
		}
	}
}

// TestWatchFile uses real files and inotify; the period is an hour, so
// every change seen is seen through inotify.
func TestWatchFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reboot-required")
	ch := watcher(t, File{Path: path}, time.Hour)
	await(t, ch, false)

	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("created: seen in %s", await(t, ch, true))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("removed: seen in %s", await(t, ch, false))

	// Written elsewhere and renamed into place, as package managers do.
	tmp := filepath.Join(dir, ".reboot-required.tmp")
	if err := os.WriteFile(tmp, []byte("*** System restart required ***\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	t.Logf("renamed into place: seen in %s", await(t, ch, true))
}

// TestWatchThroughSymlinkedDirectory: /var/run is a symlink to /run.
func TestWatchThroughSymlinkedDirectory(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("run", filepath.Join(root, "varrun")); err != nil {
		t.Fatal(err)
	}
	ch := watcher(t, File{Path: filepath.Join(root, "varrun", "reboot-required")}, time.Hour)
	await(t, ch, false)
	if err := os.WriteFile(filepath.Join(root, "run", "reboot-required"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	await(t, ch, true)
}

// TestWatchMissingDirectory falls back to the period.
func TestWatchMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	ch := watcher(t, File{Path: filepath.Join(dir, "reboot-required")}, 50*time.Millisecond)
	await(t, ch, false)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reboot-required"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	await(t, ch, true)
}

func TestWatchCommand(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "flag")
	ch := watcher(t, Command{Argv: []string{"test", "-e", flag}, RebootCodes: []int{0}, Timeout: time.Second}, 50*time.Millisecond)
	await(t, ch, false)
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	await(t, ch, true)
}
