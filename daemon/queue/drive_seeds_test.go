package queue

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDriveSeeds runs the drive on rolls drawn from seeds: the cluster
// (3 to 60 nodes in 1 to 4 zones), the limits (concurrency 1 to 3, a zone
// limit of 1 or 2, mixed configurations in one roll of three), how long a
// cycle takes, the watches' lag, hung daemons, and the faults of
// TestDriveCycleFaults in three rolls of four; the progress check where
// no daemon hangs (dConfig.progress). DRIVE_SEEDS=N runs N seeds
// (make sim: 1,000; 50 without it); DRIVE_SEED=N replays one and prints
// its trace, which is the same every time (TestDriveIsDeterministic).
func TestDriveSeeds(t *testing.T) {
	skipUnderRace(t)
	first, n := uint64(0), uint64(50)
	if s := os.Getenv("DRIVE_SEEDS"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("DRIVE_SEEDS=%q: %v", s, err)
		}
		n = v
	}
	one := os.Getenv("DRIVE_SEED")
	if one != "" {
		v, err := strconv.ParseUint(one, 10, 64)
		if err != nil {
			t.Fatalf("DRIVE_SEED=%q: %v", one, err)
		}
		first, n = v, 1
	}
	var longest time.Duration
	var slowest string
	var idle time.Duration // the longest a node stayed eligible, its daemon running
	for seed := first; seed < first+n; seed++ {
		cfg := drawRoll(seed)
		w := drive(cfg, seed)
		if one != "" {
			t.Logf("%s\n%s", describeRoll(seed, cfg), w.trace.String())
		}
		if w.broken != "" {
			tr := w.trace.String()
			t.Fatalf("%s: %s\nthe trace's end (DRIVE_SEED=%d make drive for all of it):\n%s",
				describeRoll(seed, cfg), w.broken, seed, tr[max(0, len(tr)-4000):])
		}
		idle = max(idle, w.pr.idle)
		if took := w.last.Sub(t0); took > longest {
			longest, slowest = took, describeRoll(seed, cfg)
		}
	}
	t.Logf("%d seeds from %d: the longest roll done at %v (%s); where checked, a node stayed eligible without taking its slot %v at most (the bound %v)",
		n, first, longest.Round(time.Second), slowest, idle, takeBound)
}

// drawRoll is the roll seed draws.
func drawRoll(seed uint64) dConfig {
	r := rand.New(rand.NewPCG(seed, 43))
	cfg := dConfig{
		nodes: 3 + r.IntN(58), zones: 1 + r.IntN(4), conc: 1 + r.IntN(3), zoneMax: 1 + r.IntN(2),
		hold:   time.Duration(20+r.IntN(100)) * time.Second,
		lag:    time.Duration(r.IntN(5001)) * time.Millisecond,
		mixed:  r.IntN(3) == 0,
		faults: r.IntN(4) != 0,
	}
	if r.IntN(3) == 0 {
		cfg.silentEvery = 5 + r.IntN(6)
	}
	cfg.progress = cfg.silentEvery == 0
	if r.IntN(4) == 0 {
		cfg.joinEvery = time.Second
	}
	return cfg
}

func describeRoll(seed uint64, c dConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes in %d zones, concurrency %d, %d a zone, mixed %v, cycles within %v, watches lagging up to %v, faults %v",
		seed, c.nodes, c.zones, c.conc, c.zoneMax, c.mixed, c.hold, c.lag, c.faults)
	if c.silentEvery > 0 {
		fmt.Fprintf(&b, ", every %dth daemon hung", c.silentEvery)
	}
	if c.joinEvery > 0 {
		fmt.Fprintf(&b, ", joins %v apart", c.joinEvery)
	}
	return b.String()
}
