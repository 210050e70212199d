package benchtest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// benchT is the simulated time per node (half "drain", half reboot) for
// the cases at concurrency 5 and 10; the cases at concurrency 1 take T/2,
// to keep `make bench` short (200 nodes one at a time). BENCH_T overrides
// it.
func benchT(tb testing.TB) time.Duration {
	t := 2 * time.Second
	if s := os.Getenv("BENCH_T"); s != "" {
		var err error
		if t, err = time.ParseDuration(s); err != nil {
			tb.Fatalf("BENCH_T: %v", err)
		}
	}
	return t
}

// benchCases are `make bench`'s cases, all in 3 zones with the group
// limit ⌈k/3⌉. The kured-style baseline polls every T: kured's default
// period (1 h) is 6 to 12 times a real node's cycle (5 to 10 min), so
// this is generous to it; up to 50 nodes it runs a second time with
// period 8·T, kured's own proportion.
func benchCases(t time.Duration) []rollCase {
	var cs []rollCase
	for _, n := range []int{10, 50, 200} {
		for _, k := range []int{1, 5} {
			cs = append(cs, rollCase{Nodes: n, K: k, Zones: 3})
		}
	}
	cs = append(cs, rollCase{Nodes: 500, K: 10, Zones: 3})
	for i, c := range cs {
		tc := t
		if c.K == 1 {
			tc = t / 2
		}
		cs[i].Hold, cs[i].Down, cs[i].Period = tc/2, tc-tc/2, tc
	}
	return cs
}

// BenchmarkRoll is `make bench`: every case with the slot lock and with
// the kured-style baseline, one roll each, then one table (stdout) and a
// JSON file under results/.
//
//	go test -run '^$' -bench Roll -benchtime 1x -timeout 60m ./benchtest/
func BenchmarkRoll(b *testing.B) {
	var rows []result
	for _, c := range benchCases(benchT(b)) {
		b.Run(c.String(), func(b *testing.B) {
			for b.Loop() {
				rows = append(rows, benchCase(b, c)...)
			}
		})
	}
	if len(rows) == 0 {
		return
	}
	fmt.Println()
	writeTable(os.Stdout, rows)
	path, err := writeResults(rows, benchNotes())
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("\nwritten to %s\n", path)
}

// benchCase rolls one case with each strategy, and reports the slot
// lock's figures as the benchmark's metrics.
func benchCase(b *testing.B, c rollCase) []result {
	var rows []result
	for _, s := range benchStrategies(c) {
		r := roll(b, c, s)
		rows = append(rows, r)
		if s == slotLock {
			b.ReportMetric(r.Ratio, "ratio")
			b.ReportMetric(r.HandoffP99*1000, "handoff-p99-ms")
			b.ReportMetric(r.PerAcquisition, "requests/acquisition")
			continue
		}
		if s == oracleLock {
			b.ReportMetric(r.Ratio, "oracle-ratio")
			continue
		}
		b.ReportMetric(r.Ratio, "kured-style-ratio")
		if c.Nodes <= 50 {
			// kured's own proportion: a period of 1 h against a
			// 7.5 min cycle.
			slow := c
			slow.Period = 8 * c.T()
			rows = append(rows, roll(b, slow, s))
		}
	}
	return rows
}

// benchStrategies are the slot lock and the kured-style baseline, and at
// 500 nodes (the case that measures the heartbeats) also the oracle, the
// floor that a roll's reboots alone set; or those named in
// BENCH_STRATEGIES (comma-separated).
func benchStrategies(c rollCase) []string {
	if s := os.Getenv("BENCH_STRATEGIES"); s != "" {
		return strings.Split(s, ",")
	}
	if c.Nodes >= 500 {
		return []string{slotLock, kuredStyle, oracleLock}
	}
	return []string{slotLock, kuredStyle}
}

func benchNotes() []string {
	return []string{
		"T = hold (drain) + down (reboot until Ready); ideal = rounds * T with rounds = max(ceil(N/k), ceil(zone size / group limit)); group limit = ceil(k/3).",
		"slot = mean time from taking a slot to giving it back, as an admin watch saw it: T plus the simulated host's and the daemon's own overhead; slot ratio = makespan / (rounds * slot), what the queue itself loses.",
		"hand-off = a release to the next slot taken, as an admin watch saw them.",
		"requests: the strategy's clients (by user agent) from the first sentinel to the last release, one per request, from the API server's audit log; a watch counts once, when it starts.",
		"watch events/MB: what the strategy's clients received on their watches in that window, counted client-side.",
		"kured-style: one annotation on a DaemonSet, read-modify-write with the resourceVersion (Update), kured's delaytick polling every period with admin credentials; kured's start-up check (1 min) and conflict retry (1 s) scaled by period/1h. Period T is generous to kured (its default 1 h is 6 to 12 times a 5 to 10 min cycle); up to 50 nodes it also runs with period 8T.",
		"oracle (500 nodes): no lock requests; one scheduler in the bench process hands each slot out the moment it is free, in the order asked, within the same limits. Its requests are the cordon and uncordon; its figures are what the reboots alone cost on this machine.",
		machineNote(),
	}
}

func machineNote() string {
	if cp.Pid == 0 {
		return "CPU and memory are the whole test process: API server, etcd and every simulated host on the same cores (BENCH_ONE_PROCESS)."
	}
	return "CPU is the test process's (every simulated host: daemons, kubelet stand-ins) and the control plane's (API server, etcd, in a process of its own), on the same cores; memory is the test process's alone."
}
