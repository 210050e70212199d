package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/status"
)

// `kured-host status` against a real API server, with the real binary, is
// tested in test/cluster/cycletest (TestStatus).

func TestStatusUsage(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{[]string{"status", "--help"}, exitOK, "-o json is a stable, versioned schema", ""},
		{[]string{"help", "status"}, exitOK, "-watch", ""},
		{[]string{"status", "-o", "yaml"}, exitUsage, "", `-o "yaml": use table or json`},
		{[]string{"status", "--interval", "0s"}, exitUsage, "", "--interval must be positive"},
		{[]string{"status", "--config", "../../daemon/config/testdata/bad/concurrency-zero.toml"}, exitUsage, "", "lock.concurrency: must be at least 1"},
		{[]string{"status", "--config", "/nonexistent/config.toml", "--host-root", "/nonexistent"}, exitFailure, "", "no kubelet kubeconfig found"},
		{[]string{"status", "--kubeconfig", "/nonexistent/kubeconfig"}, exitFailure, "", "/nonexistent/kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if !strings.Contains(out, tt.inStdout) || !strings.Contains(errs, tt.inStderr) {
				t.Errorf("stdout %q, stderr %q; want %q and %q in them", out, errs, tt.inStdout, tt.inStderr)
			}
		})
	}
}

func TestStatusConfig(t *testing.T) {
	t.Run("missing file: defaults, no file", func(t *testing.T) {
		_, l, err := statusConfig(filepath.Join(t.TempDir(), "config.toml"), "")
		if err != nil || l.File != "" || l.Lock.Concurrency != config.Default().Lock.Concurrency {
			t.Errorf("%+v %v", l, err)
		}
	})
	t.Run("missing file, cluster settings: theirs", func(t *testing.T) {
		_, l, err := statusConfig(filepath.Join(t.TempDir(), "config.toml"), "[lock]\nconcurrency = 4\n")
		if err != nil || l.File != "" || l.Lock.Concurrency != 4 || l.ConcurrencyFrom != config.ClusterSource+":2" {
			t.Errorf("%+v %v", l, err)
		}
	})
	t.Run("a file: its limits and where they are set", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(path, []byte("[lock]\nconcurrency = 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, l, err := statusConfig(path, "")
		if err != nil || l.File != path || l.Lock.Concurrency != 3 || l.ConcurrencyFrom != path+":2" || l.GroupsFrom != "" {
			t.Errorf("%+v %v", l, err)
		}
		// A key the file sets wins over the cluster's settings; the
		// others come from the settings.
		settings := "[lock]\nconcurrency = 5\n[[lock.groups]]\nlabel = \"rack\"\nmax = 2\n"
		_, l, err = statusConfig(path, settings)
		if err != nil || l.Lock.Concurrency != 3 || l.ConcurrencyFrom != path+":2" || l.GroupsFrom != config.ClusterSource+":3" {
			t.Errorf("with the cluster's settings: %+v %v", l, err)
		}
	})
}

func TestStatusWriter(t *testing.T) {
	r := status.Report{Time: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), NodesTotal: 3, Domains: []status.Domain{{}}}
	var out bytes.Buffer
	w := statusWriter("table", true, 2*time.Second, &out)
	for range 2 {
		if err := w(r); err != nil {
			t.Fatal(err)
		}
	}
	snap := "kured-host status · 2026-11-29 12:00:00 UTC · every 2s, or on a change\n\nno node takes part: none is waiting for or holding a reboot slot (3 nodes)\nlimits: \n"
	if got := out.String(); got != snap+"\n"+snap {
		t.Errorf("not a terminal: want snapshots separated by a blank line, got\n%q", got)
	}
}
