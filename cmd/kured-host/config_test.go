package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fromKuredData = "../../daemon/config/fromkured/testdata/"

// withStdin makes config from-kured read text as its standard input.
func withStdin(t *testing.T, text string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(text)
	t.Cleanup(func() { stdin = old })
}

func readData(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(fromKuredData + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkDropIn installs dropIn as config.d/40-from-kured.toml next to the
// example configuration and runs `check --config-only` on them, as an
// operator would: it must pass.
func checkDropIn(t *testing.T, dropIn string) (effective string) {
	t.Helper()
	dir := t.TempDir()
	example, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "config.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.d", "40-from-kured.toml")
	if err := os.WriteFile(path, []byte(dropIn), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "check", "--config-only", "--config", filepath.Join(dir, "config.toml"))
	if code != exitOK || !strings.Contains(errs, "configuration OK") || !strings.Contains(errs, path) {
		t.Fatalf("check --config-only: exit %d, stderr %q", code, errs)
	}
	return strings.ReplaceAll(out, path, "DROPIN")
}

// TestFromKuredChartDefaults: the DaemonSet kured's Helm chart renders
// with its defaults becomes the golden drop-in (the fromkured package's,
// which `go test ./daemon/config/fromkured -update` rewrites), which
// `check --config-only` accepts.
func TestFromKuredChartDefaults(t *testing.T) {
	withStdin(t, readData(t, "chart-defaults.yaml"))
	code, out, errs := runCLI(t, "config", "from-kured")
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if want := readData(t, "chart-defaults.toml"); out != want {
		t.Errorf("drop-in differs from %schart-defaults.toml:\n%s", fromKuredData, out)
	}
	checkDropIn(t, out)
}

func TestFromKured(t *testing.T) {
	tests := []struct {
		name     string
		stdin    string // a file of fromKuredData, or text
		args     []string
		code     int
		inStdout []string
		inStderr []string
		// inEffective are in check --config-only's output on the drop-in.
		inEffective []string
	}{
		{name: "flags after --", args: []string{"--", "--reboot-days=fr,sa", "--start-time", "22:00", "--end-time=04:59:59", "--time-zone=Europe/Berlin"},
			inStdout:    []string{`days = ["fri", "sat"]`, "# --reboot-days=fr,sa: the window crosses midnight"},
			inEffective: []string{`start = "22:00"  # DROPIN:`, `time_zone = "Europe/Berlin"  # DROPIN:`}},
		{name: "JSON List from -f", args: []string{"-f", fromKuredData + "list.json"},
			inStdout:    []string{`address = "127.0.0.1:9101"`, "# --notify-url=$(NOTIFY_URL): not converted"},
			inStderr:    []string{"warning: --notify-url=$(NOTIFY_URL): not converted: its value comes from $(NOTIFY_URL), from Secret kured-notify, key url", "warning: envFrom Secret kured-env"},
			inEffective: []string{`days = ["mon", "tue", "wed"]  # DROPIN:`}},
		{name: "secrets", args: []string{"--", "--notify-url=slack://hook:XOXBT0KEN-B00000000-xoxbT0kenxoxbT0ken123456@webhook", "--prometheus-url", "https://prom.example:9090"},
			inStdout: []string{`urls = ["slack://hook:XOXBT0KEN-B00000000-xoxbT0kenxoxbT0ken123456@webhook"]`, "It holds notify or Prometheus URLs"},
			inStderr: []string{"note: the drop-in holds notify or Prometheus URLs", "mode 0600", "50-notify.toml"}},
		{name: "unknown flag", args: []string{"--", "--period=2h", "--colour=always"},
			inStdout: []string{`period = "2h"`, "# --colour=always: not a flag of kured"},
			inStderr: []string{"warning: --colour=always: not a flag of kured 1.23"}},
		{name: "a Deployment", stdin: "deployment.yaml", code: exitUsage,
			inStderr: []string{"kured-host: config from-kured: not kured's DaemonSet: the input holds no DaemonSet, only Deployment kured"}},
		{name: "no kured container", stdin: "two-containers.yaml", code: exitUsage,
			inStderr: []string{"has no container named kured among reboot-daemon, sidecar"}},
		{name: "not YAML", stdin: "]]] nonsense", code: exitUsage, inStderr: []string{"not kured's DaemonSet"}},
		{name: "empty input", stdin: "", code: exitUsage, inStderr: []string{"the input is empty"}},
		{name: "-f and --", args: []string{"-f", "x.yaml", "--", "--period=1h"}, code: exitUsage, inStderr: []string{"not both"}},
		{name: "--force without -o", args: []string{"--force", "--", "--period=1h"}, code: exitUsage, inStderr: []string{"--force goes with -o FILE"}},
		{name: "no subcommand", args: nil, code: exitUsage, inStderr: []string{"name a subcommand: from-kured"}},
		{name: "help", args: []string{"--help"}, inStdout: []string{"Usage: kured-host config from-kured [-f FILE] [-o FILE [--force]] [-- KURED-FLAGS...]", "kured-host config from-kured -- --period=1h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.stdin
			if strings.HasSuffix(in, ".yaml") {
				in = readData(t, in)
			}
			withStdin(t, in)
			args := append([]string{"config", "from-kured"}, tt.args...)
			if tt.name == "no subcommand" {
				args = []string{"config"}
			}
			code, out, errs := runCLI(t, args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, errs)
			}
			for _, w := range tt.inStdout {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.inStderr {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			if tt.code != exitOK {
				if out != "" {
					t.Errorf("wrote a drop-in on failure:\n%s", out)
				}
				return
			}
			if strings.HasPrefix(out, "# kured-host drop-in") {
				effective := checkDropIn(t, out)
				for _, w := range tt.inEffective {
					if !strings.Contains(effective, w) {
						t.Errorf("effective configuration lacks %q:\n%s", w, effective)
					}
				}
			}
		})
	}
}

// TestFromKuredOutputFile: -o writes mode 0600, refuses to replace a file,
// and with --force replaces it by a new file of mode 0600.
func TestFromKuredOutputFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "40-from-kured.toml")
	mode := func() os.FileMode {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	code, out, errs := runCLI(t, "config", "from-kured", "-o", path, "--", "--notify-url=slack://hook:XOXBT0KEN-B00000000-xoxbT0kenxoxbT0ken123456@webhook")
	if code != exitOK || out != "" || !strings.Contains(errs, "wrote "+path+" (mode 0600)") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if m := mode(); m != 0o600 {
		t.Errorf("mode %o, want 600", m)
	}
	first, _ := os.ReadFile(path)
	checkDropIn(t, string(first))

	code, _, errs = runCLI(t, "config", "from-kured", "-o", path, "--", "--period=2h")
	if code != exitUsage || !strings.Contains(errs, path+" exists: --force replaces it") {
		t.Errorf("second -o: exit %d, stderr %q", code, errs)
	}
	if again, _ := os.ReadFile(path); string(again) != string(first) {
		t.Error("a refused -o changed the file")
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLI(t, "config", "from-kured", "-o", path, "--force", "--", "--period=2h")
	if code != exitOK {
		t.Fatalf("--force: exit %d, stderr %q", code, errs)
	}
	if m := mode(); m != 0o600 {
		t.Errorf("after --force, mode %o, want 600", m)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `period = "2h"`) {
		t.Errorf("--force did not replace the file:\n%s", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("left files behind: %v", entries)
	}
}

// TestStdinTerminal: with nothing piped in and no flags after --, the
// command says how to use it rather than wait on a terminal. /dev/null is
// a character device, as a terminal is, which is what is looked at.
func TestStdinTerminal(t *testing.T) {
	dev, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	old := stdin
	stdin = dev
	t.Cleanup(func() { stdin = old })
	code, _, errs := runCLI(t, "config", "from-kured")
	if code != exitUsage || !strings.Contains(errs, "standard input is a terminal") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}
