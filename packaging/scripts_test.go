package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scriptEnv runs a maintainer script against a stand-in systemctl that
// records its arguments, with /run/systemd/system and /etc/kured-host moved
// into a temporary root, so that what the script does on a host is visible.
type scriptEnv struct {
	t       *testing.T
	root    string
	systemd bool // whether /run/systemd/system exists (systemd is running)
}

func newScriptEnv(t *testing.T, systemd bool) *scriptEnv {
	t.Helper()
	e := &scriptEnv{t: t, root: t.TempDir(), systemd: systemd}
	bin := filepath.Join(e.root, "bin")
	must(t, os.MkdirAll(bin, 0o755))
	must(t, os.WriteFile(filepath.Join(bin, "systemctl"),
		[]byte("#!/bin/sh\necho \"$*\" >> \"$SYSTEMCTL_LOG\"\n"), 0o755))
	if systemd {
		must(t, os.MkdirAll(filepath.Join(e.root, "run/systemd/system"), 0o755))
	}
	must(t, os.MkdirAll(filepath.Join(e.root, "etc/kured-host/config.d"), 0o755))
	must(t, os.WriteFile(filepath.Join(e.root, "etc/kured-host/config.toml"), []byte("version = 1\n"), 0o640))
	return e
}

// run executes the script body with args and returns the systemctl calls.
func (e *scriptEnv) run(body string, args ...string) []string {
	e.t.Helper()
	body = strings.ReplaceAll(body, "/run/systemd/system", filepath.Join(e.root, "run/systemd/system"))
	body = strings.ReplaceAll(body, "/etc/kured-host", filepath.Join(e.root, "etc/kured-host"))
	script := filepath.Join(e.root, "script")
	must(e.t, os.WriteFile(script, []byte(body), 0o755))
	log := filepath.Join(e.root, "systemctl.log")
	_ = os.Remove(log)
	cmd := exec.Command("sh", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(e.root, "bin")+":/usr/bin:/bin", "SYSTEMCTL_LOG="+log)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("script %v failed: %v\n%s", args, err, out)
	}
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	must(e.t, err)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func (e *scriptEnv) configExists() bool {
	_, err := os.Stat(filepath.Join(e.root, "etc/kured-host"))
	return err == nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// scriptCase is one call of a maintainer script by dpkg or rpm.
type scriptCase struct {
	name       string
	script     string // file under packaging/
	args       []string
	systemd    bool
	calls      []string // systemctl calls expected, in order
	keepConfig bool
}

var scriptCases = []scriptCase{
	{"deb install", "deb/postinst", []string{"configure", ""}, true,
		[]string{"daemon-reload"}, true},
	{"deb install without systemd", "deb/postinst", []string{"configure", ""}, false,
		nil, true},
	{"deb upgrade", "deb/postinst", []string{"configure", "0.0.9-1"}, true,
		[]string{"daemon-reload", "try-restart kured-host.service"}, true},
	{"deb remove", "deb/prerm", []string{"remove"}, true,
		[]string{"stop kured-host.service", "--no-reload disable kured-host.service"}, true},
	{"deb remove without systemd", "deb/prerm", []string{"remove"}, false,
		[]string{"--no-reload disable kured-host.service"}, true},
	{"deb upgrade, old prerm", "deb/prerm", []string{"upgrade", "0.2.0-1"}, true,
		nil, true},
	{"deb remove, postrm", "deb/postrm", []string{"remove"}, true,
		[]string{"daemon-reload"}, true},
	{"deb purge", "deb/postrm", []string{"purge"}, true,
		[]string{"daemon-reload"}, false},
	{"deb purge without systemd", "deb/postrm", []string{"purge"}, false,
		nil, false},
	{"rpm install", "rpm/post", []string{"1"}, true,
		[]string{"daemon-reload"}, true},
	{"rpm upgrade, new post", "rpm/post", []string{"2"}, true,
		[]string{"daemon-reload"}, true},
	{"rpm remove", "rpm/preun", []string{"0"}, true,
		[]string{"stop kured-host.service", "--no-reload disable kured-host.service"}, true},
	{"rpm upgrade, old preun", "rpm/preun", []string{"1"}, true,
		nil, true},
	{"rpm upgrade, old postun", "rpm/postun", []string{"1"}, true,
		[]string{"daemon-reload", "try-restart kured-host.service"}, true},
	{"rpm remove, postun", "rpm/postun", []string{"0"}, true,
		[]string{"daemon-reload"}, true},
}

// TestMaintainerScripts runs each script as dpkg and rpm call it: the
// service is never enabled or started on install, is stopped and disabled
// on removal, restarted (if running) on upgrade, systemd is only touched
// where it runs, and only a Debian purge deletes the configuration.
func TestMaintainerScripts(t *testing.T) {
	for _, tc := range scriptCases {
		t.Run(tc.name, func(t *testing.T) {
			body, err := os.ReadFile(tc.script)
			must(t, err)
			e := newScriptEnv(t, tc.systemd)
			calls := e.run(string(body), tc.args...)
			if !slices.Equal(calls, tc.calls) {
				t.Errorf("systemctl calls %q, want %q", calls, tc.calls)
			}
			for _, c := range calls {
				if strings.HasPrefix(c, "enable") || strings.HasPrefix(c, "start") {
					t.Errorf("the script must never enable or start the service: %q", c)
				}
			}
			if e.configExists() != tc.keepConfig {
				t.Errorf("/etc/kured-host exists: %v, want %v", e.configExists(), tc.keepConfig)
			}
		})
	}
}
