package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kured-host/kured-host/packaging"
)

const example = "../../config.toml.example"

// runCLI runs the command in-process and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	code = report(err, &errb)
	return code, out.String(), errb.String()
}

func TestCheckExample(t *testing.T) {
	code, out, errs := runCLI(t, "check", "--config-only", "--config", example)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"concurrency = 1", `label = "topology.kubernetes.io/zone"`, "# ../../config.toml.example:"} {
		if !strings.Contains(out, want) {
			t.Errorf("effective configuration lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := runCLI(t, "check", "--config-only", "--quiet", "--config", example); code != exitOK || out != "" {
		t.Errorf("--quiet: exit %d, output %q", code, out)
	}
}

// TestCheckBadConfigs runs `check` on every broken file of the config
// package's testdata: exit status 2 and that file's golden report.
func TestCheckBadConfigs(t *testing.T) {
	dir := "../../daemon/config/testdata/bad"
	files, err := filepath.Glob(dir + "/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, dir+"/dropin/config.toml")
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, dir+"/"), ".toml")
		t.Run(name, func(t *testing.T) {
			code, out, errs := runCLI(t, "check", "--config", f)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if out != "" {
				t.Errorf("printed a configuration for a bad file: %s", out)
			}
			golden, err := os.ReadFile(filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			want := "kured-host: " + strings.ReplaceAll(string(golden), "testdata/bad/", dir+"/")
			if errs != want {
				t.Errorf("stderr\n%s\nwant\n%s", errs, want)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{[]string{}, exitUsage, "", "no command given"},
		{[]string{"help"}, exitOK, "Exit status: 0 ok, 1 runtime failure, 2 bad configuration or usage.", ""},
		{[]string{"--help"}, exitOK, "Commands:", ""},
		{[]string{"reboot-now"}, exitUsage, "", `unknown command "reboot-now"`},
		{[]string{"run", "--help"}, exitOK, "Usage: kured-host run [--config FILE]", ""},
		{[]string{"check", "-h"}, exitOK, "Exit status: 0 all ok (or warnings), 1 a check failed, 2 invalid configuration.", ""},
		{[]string{"help", "check"}, exitOK, "-quiet", ""},
		{[]string{"rbac", "--help"}, exitOK, "kured-host rbac | kubectl apply -f -", ""},
		{[]string{"version", "--help"}, exitOK, "Usage: kured-host version", ""},
		{[]string{"help", "config"}, exitOK, "kured-host config from-kured   write a drop-in from kured's arguments", ""},
		{[]string{"check", "--colour"}, exitUsage, "", "flag provided but not defined: -colour"},
		{[]string{"version", "extra"}, exitUsage, "", `unexpected argument "extra"`},
		{[]string{"check", "--config", "/nonexistent/config.toml"}, exitUsage, "", "/nonexistent/config.toml: file not found"},
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

func TestRBACAndVersion(t *testing.T) {
	if code, out, _ := runCLI(t, "rbac"); code != exitOK || out != string(packaging.RBAC) {
		t.Errorf("rbac: exit %d, output differs from packaging/rbac.yaml", code)
	}
	code, out, _ := runCLI(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "kured-host ") || !strings.Contains(out, "go: go1.") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

// TestRunWithoutKubeconfig: on a host with no kubelet kubeconfig the daemon
// says where it looked and exits 1. (The daemon's whole cycle, under a
// notify socket, is tested with the real binary on the cluster harness:
// test/cluster/cycletest.)
func TestRunWithoutKubeconfig(t *testing.T) {
	code, _, errs := runCLI(t, "run", "--config", example, "--host-root", t.TempDir())
	if code != exitFailure || !strings.Contains(errs, "no kubelet kubeconfig found") || !strings.Contains(errs, "set kubernetes.kubeconfig") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

func TestDaemonRefusesBadConfig(t *testing.T) {
	code, _, errs := runCLI(t, "run", "--config", "../../daemon/config/testdata/bad/concurrency-zero.toml")
	if code != exitUsage || !strings.Contains(errs, "concurrency-zero.toml:2: lock.concurrency: must be at least 1") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}
