package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kured-host/kured-host/daemon/config"
)

const (
	promPassword = "pr0mPassw0rd"
	queryToken   = "qu3ryT0ken"
	notifyToken  = "K3YK3YK3YK3Y"
)

// secretConfig writes a configuration whose Prometheus URL (a Prometheus
// on 127.0.0.1 that answers 401) has a password and a token in its query,
// with a notification URL whose host is its key.
func secretConfig(t *testing.T) string {
	t.Helper()
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	}))
	t.Cleanup(prom.Close)
	if !strings.HasPrefix(prom.URL, "http://127.0.0.1:") {
		t.Fatalf("the test Prometheus is not on 127.0.0.1: %s", prom.URL)
	}
	u := strings.Replace(prom.URL, "http://", "http://kured:"+promPassword+"@", 1) + "/prom?token=" + queryToken
	body := fmt.Sprintf(`[blockers]
inhibitors = false

[blockers.prometheus]
url = %q
timeout = "5s"

[reboot]
method = "command"
command = ["/bin/sh", "-c", "true"]

[notify]
urls = ["ifttt://%s/?events=reboot"]
`, u, notifyToken)
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func noSecrets(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range []string{promPassword, queryToken, notifyToken} {
		if strings.Contains(out, s) {
			t.Errorf("%s shows %q:\n%s", what, s, out)
		}
	}
}

// TestCheckShowsNoSecret: check --config-only and check, with a
// Prometheus that answers 401, show the URLs redacted and nothing of the
// password or the tokens.
func TestCheckShowsNoSecret(t *testing.T) {
	file := secretConfig(t)
	code, out, errs := runCLI(t, "check", "--config-only", "--config", file)
	if code != exitOK {
		t.Fatalf("check --config-only: exit %d: %s", code, errs)
	}
	noSecrets(t, "check --config-only", out+errs)
	for _, want := range []string{
		"# URLs are shown redacted",
		`url = "http://…@127.0.0.1:`,
		`urls = ["ifttt://…"]  # redacted; ` + file + ":13",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check --config-only lacks %q:\n%s", want, out)
		}
	}

	root := t.TempDir()
	for p, body := range map[string]string{"/proc/sys/kernel/random/boot_id": "b00t\n", "/run/.keep": ""} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n"+
		"contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n", fakeAPI(t, 0).URL)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runCLI(t, "check", "--config", file, "--host-root", root, "--kubeconfig", kubeconfig)
	if code != exitFailure {
		t.Errorf("check: exit %d, want %d (Prometheus refuses); stderr %q", code, exitFailure, errs)
	}
	noSecrets(t, "check", out+errs)
	if want := "fail prometheus: ask Prometheus at http://…@127.0.0.1:"; !strings.Contains(out, want) || !strings.Contains(out, "it answered 401 Unauthorized") {
		t.Errorf("check lacks %q … 401:\n%s", want, out)
	}
}

// actAsRoot makes the commands apply the root rule to the test's own
// files: owned by the test's user, who stands for root.
func actAsRoot(t *testing.T) {
	t.Helper()
	saved := configTrust
	configTrust = func() config.Trust { return config.Trust{Enforce: true, Owner: uint32(os.Getuid())} }
	t.Cleanup(func() { configTrust = saved })
}

// TestWritableConfigRefused: as root, run, check and check --config-only
// refuse a drop-in that others may write, with exit status 2 and the
// file's name.
func TestWritableConfigRefused(t *testing.T) {
	actAsRoot(t)
	dir := t.TempDir()
	main := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(main, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dropIn := filepath.Join(dir, "config.d", "50-health.toml")
	if err := os.MkdirAll(filepath.Dir(dropIn), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn, []byte("[health]\ncommand = [\"/tmp/evil\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dropIn, 0o666); err != nil {
		t.Fatal(err)
	}
	want := "kured-host: invalid configuration: " + dropIn + ": refused: it is writable by its group and others (mode 0666)"
	for _, args := range [][]string{
		{"check", "--config-only", "--config", main},
		{"check", "--config", main},
		{"run", "--config", main},
	} {
		code, out, errs := runCLI(t, args...)
		if code != exitUsage || !strings.HasPrefix(errs, want) || !strings.Contains(errs, "chmod go-w "+dropIn) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(args, " "), code, out, errs, exitUsage, want)
		}
	}
	if err := os.Chmod(dropIn, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "check", "--config-only", "--config", main); code != exitOK {
		t.Errorf("after chmod: exit %d, %s", code, errs)
	}
}
