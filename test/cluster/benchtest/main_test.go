// Package benchtest rolls a reboot through N simulated hosts against the
// real API server and measures it: makespan against the ideal, hand-off
// latency, API requests (counted at the API server, from its audit log),
// watch traffic and memory. Each case runs twice on the same harness:
// with the slot lock (daemon/lock), and with a kured-style lock (one
// shared object, compare-and-swap, polling every period) as the
// baseline. `make bench` runs BenchmarkRoll and prints one table;
// TestRollCI is the short variant that `make test` runs.
package benchtest

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/kured-host/kured-host/test/cluster"
)

var (
	cp    *cluster.ControlPlane
	audit *cluster.AuditLog
)

func TestMain(m *testing.M) {
	if served, err := cluster.ServeControlPlane(); served {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The control plane in a process of its own, as on a real cluster,
	// where the fleet is other machines: BENCH_ONE_PROCESS=1 keeps it in
	// this one, where the hosts' garbage collections stop the API server.
	opts := cluster.Options{AuditLog: true, OwnProcess: os.Getenv("BENCH_ONE_PROCESS") == ""}
	if os.Getenv("CLUSTER_LOG") != "" {
		opts.Log = os.Stderr
	}
	var err error
	if cp, err = cluster.Start(opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if audit, err = cp.AuditLog(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		cp.Stop()
		os.Exit(1)
	}
	if v := os.Getenv("BENCH_FLEET_NICE"); v != "" {
		n, err := strconv.Atoi(v)
		if err == nil {
			err = niceFleet(n)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			cp.Stop()
			os.Exit(1)
		}
	}
	code := m.Run()
	if keep := os.Getenv("BENCH_KEEP_AUDIT"); keep != "" {
		if b, err := os.ReadFile(cp.AuditLogPath); err == nil {
			_ = os.WriteFile(keep, b, 0o644)
		}
	}
	cp.Stop()
	os.Exit(code)
}
