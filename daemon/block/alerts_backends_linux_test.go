package block

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The alerts every backend holds: two firing, one pending (its "for" is
// an hour away).
const backendAlerts = "DiskFull, SlowDisk, Watchdog"

// backendWait bounds each wait on a backend: start, alerts visible.
const backendWait = 20 * time.Second

// TestAlertsRealBackends runs the blocker against the real servers that
// Debian packages, each started here on a free port of 127.0.0.1 with a
// data directory of its own: Prometheus, whose rules make the alerts, and
// VictoriaMetrics, which has no rule engine and is sent ALERTS series as
// vmalert writes them. A missing binary fails the test: `make test`
// fetches them (tools/backends.sh); KURED_HOST_SKIP_BACKENDS=1 skips it.
func TestAlertsRealBackends(t *testing.T) {
	if os.Getenv("KURED_HOST_SKIP_BACKENDS") == "1" {
		t.Skip("KURED_HOST_SKIP_BACKENDS=1")
	}
	backends := []struct {
		name, bin, pkg string
		start          func(t *testing.T, bin string) *url.URL
	}{
		{"prometheus", "prometheus", "prometheus", startPrometheus},
		{"victoria-metrics", "victoria-metrics", "victoria-metrics", startVictoriaMetrics},
	}
	tests := []struct {
		name                  string
		filter                string
		matchOnly, firingOnly bool
		want                  string // the alerts that block; "" for none
	}{
		{"every active alert blocks", "", false, false, backendAlerts},
		{"firing only: the pending one does not count", "", false, true, "DiskFull, Watchdog"},
		{"the filter ignores matches", "^Watchdog$", false, false, "DiskFull, SlowDisk"},
		{"match only: only matches count", "Disk", true, false, "DiskFull, SlowDisk"},
		{"match only, firing only", "Disk", true, true, "DiskFull"},
		{"only ignored ones", "Disk|Watchdog", false, false, ""},
		{"only ignored ones firing, a pending one left", "DiskFull|Watchdog", false, true, ""},
		{"match only: a pending match, firing only", "Slow", true, true, ""},
		{"match only: nothing matches", "NoSuchAlert", true, false, ""},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			bin, err := exec.LookPath(b.bin)
			if err != nil {
				t.Fatalf("%s is not installed (%v): `make unit` puts it in .cache/backends/bin (tools/backends.sh, from the Debian package %s; or apt-get install %s), "+
					"or set KURED_HOST_SKIP_BACKENDS=1 to leave this test out", b.bin, err, b.pkg, b.pkg)
			}
			begin := time.Now()
			u := b.start(t, bin)
			waitAlerts(t, u)
			t.Logf("%s: alerts visible after %v", b.name, time.Since(begin).Round(time.Millisecond))
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					a := &Alerts{URL: u, MatchOnly: tt.matchOnly, FiringOnly: tt.firingOnly, Timeout: 5 * time.Second}
					if tt.filter != "" {
						a.Filter = regexp.MustCompile(tt.filter)
					}
					reason, err := a.Check(context.Background())
					want := ""
					if tt.want != "" {
						want = "active Prometheus alerts: " + tt.want
					}
					if err != nil || reason != want {
						t.Errorf("Check = %q, %v; want %q", reason, err, want)
					}
				})
			}
		})
	}
}

// waitAlerts waits until the blocker sees every alert of backendAlerts.
func waitAlerts(t *testing.T, u *url.URL) {
	t.Helper()
	a := &Alerts{URL: u, Timeout: 2 * time.Second}
	want := "active Prometheus alerts: " + backendAlerts
	var reason string
	var err error
	for deadline := time.Now().Add(backendWait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if reason, err = a.Check(context.Background()); err == nil && reason == want {
			return
		}
	}
	t.Fatalf("the alerts did not show within %v: last %q, %v", backendWait, reason, err)
}

// startPrometheus runs Prometheus with rules that make the alerts,
// evaluated every second, and no scrape target. Its API is under /prom
// (--web.external-url), so that the URL's path prefix is exercised too.
func startPrometheus(t *testing.T, bin string) *url.URL {
	dir := t.TempDir()
	const rules = `groups:
  - name: kured-host-test
    interval: 1s
    rules:
      - alert: DiskFull
        expr: vector(1)
        for: 0s
        labels: {severity: critical}
      - alert: Watchdog
        expr: vector(1)
      - alert: SlowDisk
        expr: vector(1)
        for: 1h
`
	const cfg = "global:\n  evaluation_interval: 1s\nrule_files: [rules.yml]\n"
	for name, body := range map[string]string{"rules.yml": rules, "prometheus.yml": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	u := &url.URL{Scheme: "http", Host: addr, Path: "/prom"}
	exited := startChild(t, dir, bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.external-url="+u.String()+"/",
		"--log.level=warn",
	)
	waitReady(t, u.JoinPath("-", "ready").String(), exited)
	return u
}

// startVictoriaMetrics runs VictoriaMetrics and writes the ALERTS series
// into it, as vmalert would. Without -search.latencyOffset=0s it hides
// the last 30 s of samples from queries at now (the samples did not show
// within 15 s); the cache is off so that a poll before the samples are
// searchable is not remembered.
func startVictoriaMetrics(t *testing.T, bin string) *url.URL {
	dir := t.TempDir()
	addr := freeAddr(t)
	u := &url.URL{Scheme: "http", Host: addr}
	exited := startChild(t, dir, bin,
		"-httpListenAddr="+addr,
		"-storageDataPath="+filepath.Join(dir, "data"),
		"-search.latencyOffset=0s",
		"-search.disableCache",
		"-loggerLevel=WARN",
	)
	waitReady(t, u.JoinPath("health").String(), exited)
	now := time.Now().UnixMilli()
	var body strings.Builder
	for _, s := range [][2]string{{"DiskFull", "firing"}, {"Watchdog", "firing"}, {"SlowDisk", "pending"}} {
		fmt.Fprintf(&body, "ALERTS{alertname=%q,alertstate=%q,severity=\"warning\"} 1 %d\n", s[0], s[1], now)
	}
	post(t, u.JoinPath("api", "v1", "import", "prometheus").String(), body.String())
	// Imported samples become searchable after a flush, about 9 s later
	// on its own (1.79.5); this asks for it now. waitAlerts polls anyway.
	post(t, u.JoinPath("internal", "force_flush").String(), "")
	return u
}

// freeAddr is a free port on 127.0.0.1 (free when asked: the backend binds
// it a moment later).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startChild starts bin in dir, its output in dir/output (shown if the
// test fails). It is killed when the test ends, or if the test binary
// dies first (Pdeathsig). The channel is closed when it exits.
func startChild(t *testing.T, dir, bin string, args ...string) <-chan struct{} {
	t.Helper()
	out, err := os.Create(filepath.Join(dir, "output"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	// Registered after t.TempDir, so it runs before the directory goes.
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		out.Close()
		if t.Failed() {
			t.Logf("%s's output:\n%s", filepath.Base(bin), tail(filepath.Join(dir, "output")))
		}
	})
	return exited
}

// waitReady waits until GET u answers 200, or the child exits.
func waitReady(t *testing.T, u string, exited <-chan struct{}) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(backendWait); time.Now().Before(deadline); {
		if resp, err := c.Get(u); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("the server exited before it was ready (%s)", u)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not answer 200 within %v", u, backendWait)
}

func post(t *testing.T, u, body string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(u, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s %s", u, resp.Status, msg)
	}
}

// tail is the end of a file, for a failure message.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const most = 4 << 10
	if len(data) > most {
		data = data[len(data)-most:]
	}
	return string(data)
}
