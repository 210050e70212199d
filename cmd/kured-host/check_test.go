package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/doctor"
	"github.com/kured-host/kured-host/daemon/host/logindtest"
)

func TestCheckStatus(t *testing.T) {
	tests := []struct {
		name   string
		levels []doctor.Level
		code   int
		stderr string
	}{
		{"all ok", []doctor.Level{doctor.OK, doctor.OK}, exitOK, ""},
		{"warnings", []doctor.Level{doctor.OK, doctor.Warn, doctor.Warn}, exitOK, ""},
		{"one failure", []doctor.Level{doctor.OK, doctor.Fail, doctor.Warn}, exitFailure, "kured-host: 1 of 3 checks failed\n"},
		{"failures", []doctor.Level{doctor.Fail, doctor.Fail}, exitFailure, "kured-host: 2 of 2 checks failed\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fs []doctor.Finding
			for _, l := range tt.levels {
				fs = append(fs, doctor.Finding{Level: l})
			}
			var stderr bytes.Buffer
			if code := report(checkStatus(fs), &stderr); code != tt.code || stderr.String() != tt.stderr {
				t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr.String(), tt.code, tt.stderr)
			}
		})
	}
}

// fakeAPI answers the requests check makes, as node "fake" allowed to do
// everything, with its Date header skew ahead of the real time.
func fakeAPI(t *testing.T, skew time.Duration) *httptest.Server {
	reply := func(w http.ResponseWriter, v string) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
		fmt.Fprint(w, v)
	}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case r.Method == http.MethodPost && p == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
			reply(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","status":{"userInfo":{"username":"system:node:fake"}}}`)
		case r.Method == http.MethodPost && p == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			reply(w, `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","status":{"allowed":true}}`)
		case r.Method == http.MethodGet && p == "/api/v1/nodes/fake":
			reply(w, `{"apiVersion":"v1","kind":"Node","metadata":{"name":"fake","labels":{"topology.kubernetes.io/zone":"a"}},`+
				`"status":{"conditions":[{"type":"Ready","status":"True"}],"nodeInfo":{"bootID":"b00t"}}}`)
		case r.Method == http.MethodGet && p == "/api/v1/pods":
			reply(w, `{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[]}`)
		case r.Method == http.MethodGet && p == "/api/v1/namespaces/kube-system/configmaps/kured-host":
			reply(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kured-host","namespace":"kube-system"},"data":{"config.toml":"[lock]\nconcurrency = 2\n"}}`)
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestCheckHost runs check in-process on a host root with a kubeconfig for
// a fake API server and logind on a private bus: every check passes, and a
// server clock six minutes off fails the clock check alone (exit 1).
func TestCheckHost(t *testing.T) {
	stand := logindtest.Start(t)
	root := t.TempDir()
	for p, body := range map[string]string{"/proc/sys/kernel/random/boot_id": "b00t\n", "/run/.keep": ""} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := func(server string) string {
		p := filepath.Join(t.TempDir(), "kubeconfig")
		body := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n"+
			"contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n", server)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		skew  time.Duration
		quiet bool
		code  int
		want  []string
	}{
		{"in step", 0, false, exitOK, []string{
			"ok   config: valid: ../../config.toml.example",
			"ok   kubeconfig: ", "(given with --kubeconfig), server http://127.0.0.1:",
			"ok   identity: system:node:fake: node fake",
			"ok   node: fake is Ready; topology.kubernetes.io/zone=a",
			"ok   permissions: get, list, watch nodes (to read every node's claim)",
			"ok   permissions: patch nodes fake (to write its claim, cordon and uncordon)",
			"ok   permissions: list pods with spec.nodeName=fake (",
			"ok   permissions: create pods/eviction (to drain)",
			"ok   permissions: create events in default (",
			"ok   clock: this host",
			"ok   sentinel: sentinel.file " + root + "/run/reboot-required: " + root + "/run can be watched with inotify",
			"ok   boot ID: b00t",
			"ok   logind: org.freedesktop.login1 is on the system bus; CanReboot: yes; no inhibitor blocks a shutdown now",
		}},
		{"six minutes off, quiet", 6 * time.Minute, true, exitFailure, []string{
			"fail clock: this host is 6m0s behind the API server, more than 5m0s (half of lock.entering_alarm_age (10m0s))",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"check", "--config", example, "--host-root", root, "--system-bus", stand.Address,
				"--kubeconfig", kubeconfig(fakeAPI(t, tt.skew).URL)}
			if tt.quiet {
				args = append(args, "--quiet")
			}
			code, out, errs := runCLI(t, args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.code, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if lines := strings.Count(out, "\n"); tt.quiet && lines != len(tt.want) {
				t.Errorf("--quiet printed %d lines, want only the %d not ok:\n%s", lines, len(tt.want), out)
			}
		})
	}
}
