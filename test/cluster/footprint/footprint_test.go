// Package footprint measures what an idle kured-host costs: the real
// binary on a simulated host, with a valid configuration and no reboot
// needed, against the real API server with an audit log that counts every
// request it makes.
//
//	make bench-idle
package footprint

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/test/cluster"
)

var (
	cp  *cluster.ControlPlane
	bin string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kured-host-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// As `make build` builds it (static, stripped), so that the pages of
	// the binary in memory are those of the release.
	os.Setenv("CGO_ENABLED", "0")
	if bin, err = cluster.BuildKuredHost(dir, "-trimpath", "-ldflags=-s -w"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if cp, err = cluster.Start(cluster.Options{AuditLog: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cp.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// BenchmarkIdleDaemon runs kured-host idle for IDLE_FOR (default 1 min)
// after it is ready, and reports its resident memory, the CPU time it
// used while idle, the requests it made after start-up (from the API
// server's audit log: user system:node:<name>, user agent kured-host/*)
// and the size of the binary.
func BenchmarkIdleDaemon(b *testing.B) {
	idle := time.Minute
	if v := os.Getenv("IDLE_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		idle = d
	}
	for b.Loop() {
		r := idleDaemon(b, idle)
		b.ReportMetric(float64(r.startup), "startup-requests")
		b.ReportMetric(float64(r.idle), "idle-requests")
		b.ReportMetric(r.rss/1024, "rss-MiB")
		b.ReportMetric(r.hwm/1024, "peak-rss-MiB")
		b.ReportMetric(r.anon/1024, "rss-anon-MiB")
		b.ReportMetric(r.file/1024, "rss-file-MiB")
		b.ReportMetric(r.cpu.Seconds()*1000, "idle-cpu-ms")
		b.ReportMetric(r.binary/(1<<20), "binary-MiB")
	}
}

// TestIdleMakesNoRequests: the promise behind the footprint, checked in
// make test: once started, a daemon with nothing to do makes no request at
// all (no polling; the sentinel is watched with inotify), and its start-up
// makes only a handful (who am I, the access checks, its own Node).
func TestIdleMakesNoRequests(t *testing.T) {
	r := idleDaemon(t, 20*time.Second)
	if r.idle != 0 {
		t.Errorf("%d requests while idle, want none", r.idle)
	}
	if r.startup > 8 {
		t.Errorf("%d requests at start-up, want at most 8", r.startup)
	}
}

// idleResult is what an idle daemon cost: requests at start-up and while
// idle, memory (kB), CPU time while idle, binary size (bytes).
type idleResult struct {
	startup, idle        int
	rss, hwm, anon, file float64
	cpu                  time.Duration
	binary               float64
}

func idleDaemon(b testing.TB, idle time.Duration) idleResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), idle+2*time.Minute)
	defer cancel()
	began := time.Now() // the audit log has the earlier runs' too (-count)
	audit, err := cp.AuditLog()
	if err != nil {
		b.Fatal(err)
	}
	h, err := cp.AddHost(ctx, cluster.HostOptions{Name: "idle-1", Labels: map[string]string{config.ZoneLabel: "zone-a"}})
	if err != nil {
		b.Fatal(err)
	}
	defer cp.RemoveHost(context.Background(), h)
	c := config.Default()
	c.Reboot.Method, c.Reboot.Command = config.RebootCommand, h.RebootCommand()
	c.Blockers.Inhibitors = false // no system bus on a simulated host
	// As after a boot: the binary is not in the page cache, so only the
	// pages the daemon touches are read (a fresh build is all cached,
	// and the kernel maps cached files in large folios).
	if err := dropCache(bin); err != nil {
		b.Fatal(err)
	}
	k, err := h.RunKuredHost(bin, c)
	if err != nil {
		b.Fatal(err)
	}
	for !strings.Contains(k.Logs(), "msg=ready") {
		select {
		case <-ctx.Done():
			b.Fatalf("not ready:\n%s", k.Logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	pid := h.Process("kured-host").Pid
	ours := func(r cluster.Request) bool {
		return r.User == "system:node:"+h.Name && strings.HasPrefix(r.UserAgent, "kured-host/")
	}
	// A request belongs to the start-up if the API server received it
	// before the test saw the daemon ready, whenever its log line came
	// (a watch is logged once its reply starts).
	readyAt := time.Now()
	cpu0 := cpuTime(b, pid)
	time.Sleep(idle)
	cpu1 := cpuTime(b, pid)
	all, err := audit.Requests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	all = all.Where(ours)
	startup := all.Where(func(r cluster.Request) bool { return !r.Time.Before(began) && r.Time.Before(readyAt) })
	idleRequests := all.Where(func(r cluster.Request) bool { return !r.Time.Before(readyAt) })
	rss, hwm := memory(b, pid, "VmRSS"), memory(b, pid, "VmHWM")
	anon, file := memory(b, pid, "RssAnon"), memory(b, pid, "RssFile")
	st, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("start-up requests by verb/resource: %v", startup.Count(func(r cluster.Request) string { return r.Verb + " " + r.Resource + r.Subresource }))
	if len(idleRequests) > 0 {
		b.Logf("requests while idle: %v", idleRequests.Count(func(r cluster.Request) string { return r.Verb + " " + r.Resource }))
		b.Log("every request of this run, received at (from ready):")
		for _, r := range all.Where(func(r cluster.Request) bool { return !r.Time.Before(began) }) {
			b.Logf("  %s %s %s", r.Time.Sub(readyAt).Round(time.Microsecond), r.Verb, r.URI)
		}
	}
	b.Logf("idle %s: %d requests, RSS %.1f MiB (peak %.1f MiB), CPU %s, binary %.1f MiB",
		idle, len(idleRequests), rss/1024, hwm/1024, (cpu1 - cpu0).Round(time.Millisecond), float64(st.Size())/(1<<20))
	return idleResult{startup: len(startup), idle: len(idleRequests), rss: rss, hwm: hwm, anon: anon, file: file,
		cpu: cpu1 - cpu0, binary: float64(st.Size())}
}

// memory reads a kB field of /proc/PID/status.
func memory(b testing.TB, pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// cpuTime is the user and system time of a process (/proc/PID/stat).
func cpuTime(b testing.TB, pid int) time.Duration {
	d, err := cluster.CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// dropCache asks the kernel to drop the file's pages from the page cache.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
