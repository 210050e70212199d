package doctor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
)

func TestSentinel(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"run", "var/run/needed"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/run/needed/reboot-required"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "needs-restarting")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noExec := filepath.Join(root, "not-executable")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := func(p string) config.SentinelConfig {
		c := config.Default().Sentinel
		c.File = p
		return c
	}
	command := func(argv ...string) config.SentinelConfig {
		c := config.Default().Sentinel
		c.Command, c.RebootExitCodes = argv, []int{1}
		return c
	}
	noWatch := func(string) error { return errors.New("too many open files") }
	tests := []struct {
		name  string
		c     config.SentinelConfig
		watch func(string) error
		level Level
		in    string
	}{
		{"file, watched", file("/run/reboot-required"), Watch, OK, root + "/run can be watched with inotify; no reboot needed now"},
		{"file present", file("/var/run/needed/reboot-required"), Watch, OK, "a reboot is needed now"},
		{"directory missing", file("/rnu/reboot-required"), Watch, Fail, "the directory " + root + "/rnu does not exist"},
		{"not a directory", file("/plain/reboot-required"), Watch, Fail, "is not a directory"},
		{"cannot watch", file("/run/reboot-required"), noWatch, Warn, "cannot watch " + root + "/run (too many open files): the daemon will only look every 1h"},
		{"command", command(script, "-r"), Watch, OK, script + " is executable, run every 1h; exit codes [1] mean a reboot is needed"},
		{"command on $PATH", command("sh", "-c", "exit 1"), Watch, OK, "is executable"},
		{"command missing", command(root + "/nope"), Watch, Fail, "no such file or directory"},
		{"command not found on $PATH", command("kured-host-no-such-command"), Watch, Fail, "executable file not found in $PATH"},
		{"command not executable", command(noExec), Watch, Fail, "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Sentinel(tt.c, host.Root(root), tt.watch)
			if f.Level != tt.level || f.Check != "sentinel" || !strings.Contains(f.Message, tt.in) {
				t.Errorf("got %s; want level %s and %q", f, tt.level, tt.in)
			}
		})
	}
}

func TestBootID(t *testing.T) {
	root := t.TempDir()
	if f := BootID(host.Root(root)); f.Level != Fail || !strings.Contains(f.Message, "cannot tell a reboot from a restart") {
		t.Errorf("without a boot ID: %s", f)
	}
	p := filepath.Join(root, host.BootIDPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("abc-123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if f := BootID(host.Root(root)); f.Level != OK || !strings.HasPrefix(f.Message, "abc-123 (") {
		t.Errorf("with a boot ID: %s", f)
	}
}

func TestAllInterfaces(t *testing.T) {
	for addr, want := range map[string]bool{
		":9779": true, "0.0.0.0:9779": true, "[::]:9779": true,
		"127.0.0.1:9779": false, "[::1]:9779": false, "localhost:9779": false, "10.0.0.7:9779": false, "9779": false,
	} {
		if got := AllInterfaces(addr); got != want {
			t.Errorf("AllInterfaces(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	free.Close()

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	ours := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE kured_host_state gauge\nkured_host_state{state=\"idle\"} 1")
	}))
	defer ours.Close()
	_, oursPort, _ := net.SplitHostPort(ours.Listener.Addr().String())

	client := &http.Client{Timeout: time.Second}
	tests := []struct {
		name  string
		addr  string
		level Level
		in    string
	}{
		{"free", freeAddr, OK, "can be listened on"},
		{"taken by another program", taken.Addr().String(), Fail, "in use by another program"},
		{"taken by kured-host", ours.Listener.Addr().String(), OK, "in use by a running kured-host"},
		{"taken by kured-host, any address", ":" + oursPort, Warn, "in use by a running kured-host (it serves kured_host_* metrics there); it listens on every interface: use 127.0.0.1:" + oursPort + " unless"},
		{"not an address here", "192.0.2.1:9100", Fail, "metrics.address 192.0.2.1:9100: listen tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Metrics(ctx, tt.addr, client)
			if f.Level != tt.level || f.Check != "metrics" || !strings.Contains(f.Message, tt.in) {
				t.Errorf("got %s; want level %s and %q", f, tt.level, tt.in)
			}
		})
	}
}

func TestExecutable(t *testing.T) {
	if f := Executable("reboot", "reboot.command", nil); f.Level != Fail || f.Message != "reboot.command is empty" {
		t.Errorf("empty: %s", f)
	}
	if f := Executable("reboot", "reboot.command", []string{"sh", "-c", "true"}); f.Level != OK || !strings.Contains(f.Message, `reboot.command "sh -c true": /`) {
		t.Errorf("sh: %s", f)
	}
}
