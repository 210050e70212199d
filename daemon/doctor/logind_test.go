package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/host/logindtest"
)

// TestLogindOnARealBus runs the check against a private dbus-daemon, with
// and without the logind stand-in on it.
func TestLogindOnARealBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus, err := logindtest.StartBus(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Stop()
	both := LogindUse{Reboot: true, Inhibitors: true}

	// Before the stand-in owns its name: the bus is there, logind is not.
	f := Logind(ctx, DialLogind(bus.Address), both)
	if f.Level != Fail || f.Message != `org.freedesktop.login1 is not on the system bus: is systemd-logind running? (needed for reboot.method = "logind" and blockers.inhibitors = true)` {
		t.Errorf("without logind: %s", f)
	}

	stand, err := logindtest.Serve(bus.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stand.Close()
	tests := []struct {
		name       string
		use        LogindUse
		canReboot  string
		inhibitors []logindtest.Inhibitor
		level      Level
		want       string
	}{
		{"reboot and inhibitors", both, "yes", nil, OK,
			"org.freedesktop.login1 is on the system bus; CanReboot: yes; no inhibitor blocks a shutdown now"},
		{"a blocking inhibitor", LogindUse{Inhibitors: true}, "yes",
			[]logindtest.Inhibitor{{What: "shutdown", Who: "apt", Why: "Installing packages", Mode: "block", PID: 42}, {What: "shutdown", Who: "nm", Why: "x", Mode: "delay"}}, OK,
			"org.freedesktop.login1 is on the system bus; an inhibitor blocks a shutdown now (a reboot waits for it to go): apt (pid 42): Installing packages"},
		{"reboot only", LogindUse{Reboot: true}, "yes", []logindtest.Inhibitor{{What: "shutdown", Who: "apt", Mode: "block"}}, OK,
			"org.freedesktop.login1 is on the system bus; CanReboot: yes"},
		{"not root, challenged", LogindUse{Reboot: true, UID: 1000}, "challenge", nil, Warn,
			"org.freedesktop.login1 is on the system bus; CanReboot: challenge for uid 1000; the service runs as root: run check as root to know whether it may reboot"},
		{"root, refused", LogindUse{Reboot: true}, "no", nil, Fail,
			`CanReboot: no, even as root: logind would refuse to reboot (reboot.method = "logind"); is polkit in the way?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stand.SetCanReboot(tt.canReboot)
			stand.SetInhibitors(tt.inhibitors)
			f := Logind(ctx, DialLogind(bus.Address), tt.use)
			if f.Level != tt.level || f.Check != "logind" || f.Message != tt.want {
				t.Errorf("got %s\nwant %s %s", f, tt.level, tt.want)
			}
		})
	}

	if f := Logind(ctx, DialLogind("unix:path="+t.TempDir()+"/none"), LogindUse{Inhibitors: true}); f.Level != Fail ||
		!strings.HasPrefix(f.Message, "connect to the system bus: ") || !strings.HasSuffix(f.Message, "(needed for blockers.inhibitors = true)") {
		t.Errorf("no bus: %s", f)
	}
}

// TestRun: on a host root without a kubeconfig, with logind on a private
// bus, Run reports every check the configuration calls for, in order.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stand := logindtest.Start(t)
	root := t.TempDir()
	for p, body := range map[string]string{host.BootIDPath: "b00t\n", "/run/.keep": ""} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		config func(*config.Config)
		want   []string // "level check"
	}{
		{"defaults", nil, []string{"fail kubeconfig", "ok sentinel", "ok window", "ok boot ID", "ok logind"}},
		{"command reboot, health, metrics, no inhibitors", func(c *config.Config) {
			c.Reboot.Method, c.Reboot.Command = config.RebootCommand, []string{"/bin/sh", "-c", "exit 0"}
			c.Health.Command = []string{"kured-host-no-such-health-check"}
			c.Blockers.Inhibitors = false
			c.Metrics.Address = "127.0.0.1:0"
		}, []string{"fail kubeconfig", "ok sentinel", "ok window", "ok boot ID", "ok reboot", "fail health", "ok metrics"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			if tt.config != nil {
				tt.config(&c)
			}
			var got []string
			Run(ctx, Options{Config: c, Root: host.Root(root), BusAddress: stand.Address}, func(f Finding) {
				got = append(got, f.Level.String()+" "+f.Check)
			})
			if strings.Join(got, ", ") != strings.Join(tt.want, ", ") {
				t.Errorf("findings %q, want %q", got, tt.want)
			}
		})
	}
}
