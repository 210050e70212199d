package benchtest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// writeTable prints the results as one Markdown table, the strategies of
// each case on consecutive lines.
func writeTable(w io.Writer, rows []result) {
	fmt.Fprintln(w, "| N | k | zones (max) | strategy | T | makespan | ideal | ratio | slot (ratio) | hand-off p50 / p99 | requests | per acq. | peak/s | reads/node | received MB | watch events (MB) | CPU s | RSS peak MB (+/node) |")
	fmt.Fprintln(w, "|---:|---:|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		strategy := label(r)
		perNode := (r.RSSPeakMB - r.RSSBeforeMB) / float64(r.Nodes)
		makespan, ratio := secs(r.Makespan), fmt.Sprintf("%.3f", r.Ratio)
		if r.Unfinished != "" {
			makespan, ratio = "> "+makespan+" (unfinished)", "> "+ratio
		}
		fmt.Fprintf(w, "| %d | %d | %d (%d) | %s | %s | %s | %s | %s | %s (%.3f) | %s / %s | %d | %.1f | %d | %.1f | %.1f | %d (%.1f) | %.0f | %.0f (%+.1f) |\n",
			r.Nodes, r.Concurrency, r.Zones, r.GroupLimit, strategy, secs(r.T),
			makespan, secs(r.Ideal), ratio, secs(r.SlotMean), r.SlotRatio,
			ms(r.HandoffP50), ms(r.HandoffP99),
			r.Requests, r.PerAcquisition, r.PeakPerSecond, r.ReadsPerNode,
			r.ReceivedMB, r.WatchEvents, r.WatchMB, r.CPUSeconds, r.RSSPeakMB, perNode)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Requests by verb (total; peak per second), and writes refused with a conflict:")
	for _, r := range rows {
		var parts []string
		for _, v := range slices.Sorted(maps.Keys(r.ByVerb)) {
			parts = append(parts, fmt.Sprintf("%s %d (%d/s)", v, r.ByVerb[v], r.PeakByVerb[v]))
		}
		fmt.Fprintf(w, "- N=%d, k=%d, %s: %s; %.1f reads of the queue per node; %d conflicts, %d throttled\n", r.Nodes, r.Concurrency, label(r), strings.Join(parts, ", "), r.QueueReadsPerNode, r.Conflicts, r.Throttled)
		if len(r.ConflictsAfter) > 0 {
			fmt.Fprintf(w, "  conflicts by the writer's request before them: %v\n", r.ConflictsAfter)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The busiest second (seconds after the first sentinel): its requests by kind, most first:")
	for _, r := range rows {
		kinds := slices.SortedFunc(maps.Keys(r.BusiestSecond), func(a, b string) int {
			return cmp.Or(cmp.Compare(r.BusiestSecond[b], r.BusiestSecond[a]), strings.Compare(a, b))
		})
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.BusiestSecond[k]))
		}
		fmt.Fprintf(w, "- N=%d, k=%d, %s: at %.1f s: %s\n", r.Nodes, r.Concurrency, label(r), r.BusiestSecondAfter, strings.Join(parts, "; "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Kubelet heartbeats (Lease renewals, status reports), p50 / p99 (count): idle; the whole roll; the roll's busiest second:")
	for _, r := range rows {
		fmt.Fprintf(w, "- N=%d, k=%d, %s: idle %s; roll %s (leases %s, status reports %s); busiest second %s, max %.0f ms; %d throttled, %d failed\n",
			r.Nodes, r.Concurrency, label(r), r.HeartbeatIdle, r.HeartbeatRoll, r.HeartbeatRollByKind["lease"], r.HeartbeatRollByKind["status"],
			r.HeartbeatBusy, r.HeartbeatBusy.MaxMs, r.HeartbeatThrottled, r.HeartbeatFailed)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The same heartbeats' writes (Lease updates, status patches) as the API server timed them, received to response complete (audit log), p50 / p99 (count): idle; the whole roll; the busiest second:")
	for _, r := range rows {
		fmt.Fprintf(w, "- N=%d, k=%d, %s: idle %s; roll %s; busiest second %s, max %.0f ms\n",
			r.Nodes, r.Concurrency, label(r), r.HeartbeatServerIdle, r.HeartbeatServerRoll, r.HeartbeatServerBusy, r.HeartbeatServerBusy.MaxMs)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The roll's heartbeats split where kured-host's join spread ends (the same cut for every strategy), p50 / p99 (count): during the joins; after them; round trip, then the server's time:")
	for _, r := range rows {
		fmt.Fprintf(w, "- N=%d, k=%d, %s: first %.0f s %s, after %s; server %s, after %s\n",
			r.Nodes, r.Concurrency, label(r), r.JoinSeconds, r.HeartbeatJoin, r.HeartbeatAfterJoin, r.HeartbeatServerJoin, r.HeartbeatServerAfterJoin)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The machine: CPU of the test process and the control plane (cores busy of %d), and the waits in the queues of the priority level %s (the heartbeats', shared with kured-host's reads and writes of Nodes), from the API server's %s: idle; the whole roll; around the busiest second:\n", runtime.NumCPU(), heartbeatLevel, apfWaitMetric)
	for _, r := range rows {
		fmt.Fprintf(w, "- N=%d, k=%d, %s: idle %.2f cores, %s; roll %.2f cores, %s; busiest second %.2f cores, %s\n",
			r.Nodes, r.Concurrency, label(r), r.LoadIdle.Cores, r.LoadIdle.Wait, r.LoadRoll.Cores, r.LoadRoll.Wait, r.LoadBusy.Cores, r.LoadBusy.Wait)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU seconds over the roll (the table's CPU s): the control plane's process (API server, etcd, controllers), and the test process's (every simulated host and the bench):")
	for _, r := range rows {
		fmt.Fprintf(w, "- N=%d, k=%d, %s: control plane %.1f s, hosts %.1f s\n", r.Nodes, r.Concurrency, label(r), r.ServerCPUSeconds, r.CPUSeconds-r.ServerCPUSeconds)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Received MB by kind of request:")
	for _, r := range rows {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.ReceivedByKind)) {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, r.ReceivedByKind[k]))
		}
		fmt.Fprintf(w, "- N=%d, k=%d, %s: %s\n", r.Nodes, r.Concurrency, label(r), strings.Join(parts, "; "))
	}
	for _, r := range rows {
		if r.Unfinished != "" {
			fmt.Fprintf(w, "\nN=%d, k=%d, %s: %s\n", r.Nodes, r.Concurrency, label(r), r.Unfinished)
		}
	}
}

// label is the strategy, with the kured-style period.
func label(r result) string {
	if r.Period > 0 {
		return fmt.Sprintf("%s (period %s)", r.Strategy, secs(r.Period))
	}
	return r.Strategy
}

// commit names the checkout the benchmark ran on.
func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func secs(s float64) string { return fmt.Sprintf("%.2fs", s) }

func ms(s float64) string { return fmt.Sprintf("%.0fms", s*1000) }

// report is the JSON written under results/.
type report struct {
	Time      time.Time `json:"time"`
	Commit    string    `json:"commit"` // git describe --always --dirty
	GoVersion string    `json:"goVersion"`
	CPUs      int       `json:"cpus"`
	Notes     []string  `json:"notes"`
	Cases     []result  `json:"cases"`
}

// writeResults writes rows as JSON to $BENCH_RESULTS (default: results/ at
// the repository root), named by the time, and returns the path.
func writeResults(rows []result, notes []string) (string, error) {
	dir := os.Getenv("BENCH_RESULTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	now := time.Now().UTC()
	b, err := json.MarshalIndent(report{Time: now, Commit: commit(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Notes: notes, Cases: rows}, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bench-"+now.Format("20060102T150405Z")+".json")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}
