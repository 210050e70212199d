package sim

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

var (
	seeds    = flag.Int("sim.seeds", envInt("SIM_SEEDS", 0), "how many seeds TestSim runs (0: skip; make sim sets it)")
	first    = flag.Int64("sim.first", 1, "the first seed")
	verbose  = flag.Bool("sim.trace", false, "print every run's trace")
	maxFails = flag.Int("sim.maxfail", 3, "stop after this many failed seeds")
	serial   = flag.Bool("sim.serial", false, "run the seeds one after the other, in order (to count the seeds a failure needs)")
)

// TestMain replaces client-go's handler of errors it cannot return (a
// watch that failed): its back-off keeps the time of the last error in a
// global, and each synctest bubble's clock starts in the year 2000, so a
// time from another bubble (or from the real clock) makes it sleep for
// years. The daemon sees those errors through its own requests anyway.
func TestMain(m *testing.M) {
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(context.Context, error, string, ...any) {}}
	// client-go's own warnings (a watch that ended) say what the faults did.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
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
	var mu sync.Mutex
	var nodeTime time.Duration
	var nodes, reboots, requests, failed int
	// One subtest per seed, two at a time or more (each in its own
	// synctest bubble): the seeds are independent.
	t.Run("seeds", func(t *testing.T) {
		for seed := from; seed < from+int64(n); seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				if !*serial {
					t.Parallel()
				}
				mu.Lock()
				stop := failed >= *maxFails
				mu.Unlock()
				if stop {
					t.Skip("enough failed seeds")
				}
				o := Draw(seed)
				if os.Getenv("SIM_DEBUG") != "" {
					o.LogLevel = slog.LevelDebug
				}
				var res Result
				synctest.Test(t, func(t *testing.T) { res = New(o).Run(t.Context()) })
				mu.Lock()
				nodeTime += res.Took * time.Duration(o.Nodes)
				nodes += o.Nodes
				reboots += res.Reboots
				requests += res.Requests
				if len(res.Violations) > 0 {
					failed++
				}
				mu.Unlock()
				if *verbose {
					t.Logf("%s\n%s", o, strings.Join(res.Trace, "\n"))
				}
				if len(res.Violations) > 0 {
					t.Errorf("%s\n%d violation(s):\n  %s\ntrace:\n%s\nlast log lines:\n%s\nseed %d: %s\nreplay: make sim SEED=%d",
						o, len(res.Violations), strings.Join(res.Violations, "\n  "), strings.Join(res.Trace, "\n"), res.Logs,
						// Again at the end: CI shows the tail of a long report.
						seed, strings.Join(res.Violations, "; "), seed)
				}
			})
		}
	})
	real := time.Since(began)
	// Printed, not logged: make sim shows it for a run that passes.
	fmt.Printf("sim: %d seeds in %s (%d at a time): %.0f seeds/min, %.0f simulated node-hours/min, %.1f nodes per run, %d reboots, %d requests, %d failed\n",
		n, real.Round(time.Millisecond), runtime.GOMAXPROCS(0), float64(n)/real.Minutes(), nodeTime.Hours()/real.Minutes(), float64(nodes)/float64(n), reboots, requests, failed)
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
