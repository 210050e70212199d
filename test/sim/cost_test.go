package sim

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/test/sim/api"
)

// TestRollCost measures what a roll costs the API server, on the
// simulator: N nodes in 3 zones, k = 10 at once and at most 4 per zone
// (as `make bench`), every node learning of the update within a minute,
// no faults. It prints the requests the daemons made (total, per
// acquisition, mean and peak per second), the bytes they received per node
// (replies and watch events, as protobuf), and the makespan against the
// ideal. The simulated API answers in no time (virtual time moves only
// while every goroutine waits), so the peak per second counts what the
// daemons ask within one second; a real server spreads it by its
// latency. It asserts no figure: it is a measurement (`make sim-cost`,
// SIM_COST_NODES=30,100,1000), skipped otherwise.
//
// SIM_COST_FOR (a duration) measures only the roll's first stretch of
// virtual time: the join burst and the longest queue, where the load is
// highest. The row then counts the acquisitions done by its end, and the
// ideal is their rounds; a roll of 5,000 nodes, five simulated hours,
// takes this machine hours of CPU (the waiting nodes' polls grow with
// N × wait), and its first hour is what it costs the API server most.
func TestRollCost(t *testing.T) {
	spec := os.Getenv("SIM_COST_NODES")
	if spec == "" {
		t.Skip("a measurement: make sim-cost (SIM_COST_NODES=30,100)")
	}
	var window time.Duration
	if v := os.Getenv("SIM_COST_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 2*time.Minute {
			t.Fatalf("SIM_COST_FOR: %q is not a duration of at least 2m", v)
		}
		window = d
	}
	var rows []string
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("SIM_COST_NODES: %q is not a number of nodes", f)
		}
		o := Options{
			Seed: 1, Nodes: n, Zones: 3, Concurrency: 10, ZoneMax: 4, PodsPerNode: 1,
			NeedSpread: Span{0, time.Minute}, DownTime: Span{30 * time.Second, 30 * time.Second},
			KubeletDelay: Span{5 * time.Second, 5 * time.Second}, Deadline: cmp.Or(window, 48*time.Hour),
			LogLevel: 100, // nothing: the logs of thousands of daemons cost more than the roll
		}
		meter := api.NewMeter()
		var store atomic.Pointer[api.Store]
		o.Setup = func(w *World) {
			w.store.Meter = meter
			store.Store(w.store)
		}
		began := time.Now()
		stop := heapPeaks(t, fmt.Sprintf("%s.%d", os.Getenv("SIM_COST_HEAP"), n), &store)
		w, res := runScenario(t, o, 0)
		stop()
		for _, v := range res.Violations {
			if window > 0 && strings.Contains(v, "not settled within") {
				continue // the window ends the roll on purpose
			}
			t.Errorf("N=%d: violation: %s", n, v)
		}
		if !res.Completed && window == 0 {
			t.Errorf("N=%d: the roll did not complete", n)
		}
		rows = append(rows, costRow(w, meter.Figures(), window, time.Since(began)))
		t.Logf("N=%d: requests by kind, most first:\n%s", n, kindTable(meter.Kinds(), nil, 20))
		t.Logf("N=%d: watch events received, by watch, most first:\n%s", n, eventTable(meter.EventBytes(), n))
		lists := listsPerNode(w)
		t.Logf("N=%d: Lists per node over the roll: at most %d, %.1f on average", n, slices.Max(lists), mean(lists))
	}
	span := "makespan"
	if window > 0 {
		span = "acquired in the first " + window.String()
	}
	t.Logf("\n| N | "+span+" | ideal | ratio | slot T | requests | per acq. | mean/s | peak/s (at) | received per node | wall |\n"+
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n%s", strings.Join(rows, "\n"))
}

// costRow is one line of TestRollCost's table. The ideal is rounds × T:
// T the mean time a node held its slot, rounds max(⌈N/k⌉, ⌈zone size /
// zone limit⌉); the makespan runs from the start (the needs come within
// its first minute) to the last release. For a window, the ideal is the
// rounds of the releases done in it, and the ratio is the time from the
// start to the last of them against that (not the window's length: a
// window's tail after its last release is no one's slot time).
func costRow(w *World, f api.MeterFigures, window, wall time.Duration) string {
	first, last := w.start, w.start
	holding := map[string]time.Time{}
	var held []time.Duration
	for _, r := range w.store.Revisions() {
		n := r.Node
		state := claim.State(n.Labels[claim.Label])
		switch since, ok := holding[n.Name]; {
		case state == claim.Holding && !ok:
			holding[n.Name] = r.At
		case state != claim.Holding && ok:
			held = append(held, r.At.Sub(since))
			delete(holding, n.Name)
			last = r.At
		}
	}
	zones := map[string]int{}
	for _, h := range w.Hosts {
		zones[h.Zone]++
	}
	nodes := len(w.Hosts)
	var sum time.Duration
	for _, d := range held {
		sum += d
	}
	t := sum / time.Duration(max(len(held), 1))
	rounds := int(math.Ceil(float64(nodes) / float64(w.o.Concurrency)))
	for _, size := range zones {
		rounds = max(rounds, int(math.Ceil(float64(size)/float64(w.o.ZoneMax))))
	}
	makespan := last.Sub(first)
	span := makespan.Round(time.Second).String()
	if window > 0 {
		// Part of the queue: its zones take turns, and their limits
		// together allow more than k, so k bounds each round.
		rounds = int(math.Ceil(float64(len(held)) / float64(w.o.Concurrency)))
		span = fmt.Sprintf("%d, the last at %s", len(held), span)
	}
	ideal := time.Duration(rounds) * t
	acquisitions := max(len(held), 1)
	secs := max(f.Seconds, 1)
	return fmt.Sprintf("| %d | %s | %s | %.3f | %s | %d | %.1f | %.1f | %d (%s) | %.2f MB | %s |",
		nodes, span, ideal.Round(time.Second), makespan.Seconds()/ideal.Seconds(), t.Round(100*time.Millisecond),
		f.Requests, float64(f.Requests)/float64(acquisitions), float64(f.Requests)/float64(secs), f.PeakPerSec, f.PeakAt.Sub(w.start.Truncate(time.Second)),
		float64(f.Bytes)/float64(nodes)/1e6, wall.Round(time.Second))
}

// kindTable lists the kinds of request (what they cost since before, when
// given), most requests first, at most top of them.
func kindTable(now, before map[string]api.KindCount, top int) string {
	type row struct {
		kind string
		api.KindCount
	}
	var rows []row
	for k, c := range now {
		c.Requests -= before[k].Requests
		c.Bytes -= before[k].Bytes
		if c.Requests > 0 || c.Bytes > 0 {
			rows = append(rows, row{k, c})
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.kind, b.kind))
	})
	var b strings.Builder
	for i, r := range rows {
		if i == top {
			break
		}
		fmt.Fprintf(&b, "  %9d requests %9.1f MB  %s\n", r.Requests, float64(r.Bytes)/1e6, r.kind)
	}
	return b.String()
}

// heapPeaks, when SIM_COST_HEAP names a file, writes there the heap
// profile of the largest heap seen in use (looked at every second of
// wall time, outside the simulation's virtual time), for `go tool pprof`:
// the simulator's memory grows with the roll.
func heapPeaks(t *testing.T, path string, store *atomic.Pointer[api.Store]) (stop func()) {
	if os.Getenv("SIM_COST_HEAP") == "" {
		return func() {}
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		var peak, stacks, sys uint64
		goroutines, watches, queued := 0, 0, 0
		began, said := time.Now(), time.Now()
		var lastKinds map[string]api.KindCount
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				t.Logf("heap profile at the peak (%d MB in use): %s; at most %d MB of stacks, %d MB from the OS, %d goroutines, %d watches, %d events queued",
					peak>>20, path, stacks>>20, sys>>20, goroutines, watches, queued)
				return
			case <-tick.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			stacks, sys, goroutines = max(stacks, m.StackInuse), max(sys, m.Sys), max(goroutines, runtime.NumGoroutine())
			if s := store.Load(); s != nil {
				w, q := s.WatchStats()
				watches, queued = max(watches, w), max(queued, q)
				// A line a minute, so that a roll of hours shows how far
				// it is and what its memory holds as it goes.
				if time.Since(said) >= time.Minute {
					said = time.Now()
					revs, over := s.Written()
					kinds := s.Meter.Kinds()
					fmt.Fprintf(os.Stderr, "%s: at %s of the roll, %d Node revisions; heap %d MB, %d goroutines, %d watches, %d events queued; since the last line:\n%s",
						time.Since(began).Round(time.Second), over.Round(time.Second), revs, m.HeapInuse>>20, runtime.NumGoroutine(), w, q, kindTable(kinds, lastKinds, 5))
					lastKinds = kinds
				}
			}
			if m.HeapInuse <= peak {
				continue
			}
			peak = m.HeapInuse
			if f, err := os.Create(path); err == nil {
				_ = pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

func mean(xs []int) float64 {
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(max(len(xs), 1))
}

// eventTable lists the bytes of watch events by the kind of watch, most
// first, with the bytes per node.
func eventTable(bytes map[string]int64, nodes int) string {
	kinds := slices.SortedFunc(maps.Keys(bytes), func(a, b string) int { return cmp.Compare(bytes[b], bytes[a]) })
	var out strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&out, "%10.1f MB %8.1f KB per node  %s\n", float64(bytes[k])/1e6, float64(bytes[k])/1e3/float64(nodes), k)
	}
	return out.String()
}
