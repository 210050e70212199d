package sim

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

var (
	seeds    = flag.Int("sim.seeds", envInt("SIM_SEEDS", 0), "how many seeds TestSim runs (0: skip; make sim sets it)")
	first    = flag.Int64("sim.first", 1, "the first seed")
	verbose  = flag.Bool("sim.trace", false, "print every run's trace")
	maxFails = flag.Int("sim.maxfail", 3, "stop after this many failed seeds")
)

// TestMain replaces client-go's handler of errors it cannot return (a
// watch that failed): its back-off keeps the time of the last error in a
// global, and each synctest bubble's clock starts in the year 2000, so a
// time from another bubble (or from the real clock) makes it sleep for
// years. The daemon sees those errors through its own requests anyway.
func TestMain(m *testing.M) {
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(context.Context, error, string, ...any) {}}
	os.Exit(m.Run())
}

// TestSim runs the real daemon on simulated clusters, one per seed, each
// under the faults its seed draws, and reports every invariant broken.
// SIM_SEED=N (make sim SEED=N) replays one seed.
func TestSim(t *testing.T) {
	from, n := *first, *seeds
	if s := os.Getenv("SIM_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &from); err != nil {
			t.Fatalf("SIM_SEED=%q: %v", s, err)
		}
		n = 1
	}
	if n == 0 {
		t.Skip("no seeds: make sim runs the simulator (SIM_SEEDS=N, or SIM_SEED=N for one)")
	}
	began := time.Now()
	var virtual, nodeTime time.Duration
	var nodes, reboots, requests, failed int
	for seed := from; seed < from+int64(n); seed++ {
		o := Draw(seed)
		if os.Getenv("SIM_DEBUG") != "" {
			o.LogLevel = slog.LevelDebug
		}
		var res Result
		synctest.Test(t, func(t *testing.T) { res = New(o).Run(t.Context()) })
		virtual += res.Took
		nodeTime += res.Took * time.Duration(o.Nodes)
		nodes += o.Nodes
		reboots += res.Reboots
		requests += res.Requests
		if *verbose {
			t.Logf("%s\n%s", o, strings.Join(res.Trace, "\n"))
		}
		if len(res.Violations) > 0 {
			failed++
			t.Errorf("%s\n%d violation(s):\n  %s\ntrace:\n%s\nlast log lines:\n%s\nreplay: make sim SEED=%d",
				o, len(res.Violations), strings.Join(res.Violations, "\n  "), strings.Join(res.Trace, "\n"), res.Logs, seed)
			if failed >= *maxFails {
				break
			}
		}
	}
	real := time.Since(began)
	t.Logf("%d seeds in %s: %.0f seeds/min, %.1f simulated node-hours/min, %.1f nodes per run, %d reboots, %d requests",
		n, real.Round(time.Millisecond), float64(n)/real.Minutes(), nodeTime.Hours()/real.Minutes(), float64(nodes)/float64(n), reboots, requests)
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		var n int
		if _, err := fmt.Sscan(v, &n); err == nil {
			return n
		}
	}
	return def
}
