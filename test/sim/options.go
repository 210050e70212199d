package sim

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
)

// Options are one run's cluster and faults, all drawn from its seed.
type Options struct {
	Seed        int64
	Nodes       int
	Zones       int // 0: no zone labels
	PodsPerNode int
	// Concurrency and ZoneMax are the lock settings (ZoneMax 0: no group
	// rule); with Mixed, each node draws its own up to these.
	Concurrency, ZoneMax int
	Mixed                bool
	// Skewed puts most nodes in the first zone.
	Skewed       bool
	ReleaseDelay time.Duration
	// DrainDelay and RebootDelay: drain.delay and reboot.delay. Phases
	// cordoned and drained are written only to span them.
	DrainDelay, RebootDelay time.Duration
	NeedSpread              Span // when each node learns it needs a reboot
	DownTime                Span // a reboot's down time
	KubeletDelay            Span // how long the kubelet takes to report a boot
	ClockSkew               time.Duration
	Deadline                time.Duration
	Faults                  FaultSet
	// LogLevel of the daemons' logs kept for a failed run's report.
	LogLevel slog.Level

	// A regression scenario sets these in place of what a seed draws:
	// Setup changes the hosts once built; NeedAt says when each host
	// learns it needs a reboot; Script arms the scenario's own faults.
	Setup  func(w *World)
	NeedAt func(h *Host) time.Duration
	Script func(w *World)
}

// FaultSet says which faults a run injects.
type FaultSet struct {
	Crash        bool // kured-host killed and restarted anywhere
	LostReply    bool // writes applied, replies lost
	Outage       bool // the API refuses everything for a while
	WatchEnd     bool // watches end; the history is compacted (410)
	WatchLag     bool // watches and cached Lists lag behind
	AdminEdits   bool // claims removed, label-only edits, garbage, future versions
	NodeDelete   bool // a Node deleted and registered again
	Relabel      bool // a node moved to another zone
	Unplanned    bool // a second, unplanned reboot in any phase
	SlowKubelet  bool // a kubelet slow to report the boot
	Death        bool // a machine that dies for good
	ClockOffsets bool // host clocks minutes off
	Blocked      bool // a blocker says no on some hosts for a while
	StuckBudget  bool // a budget refuses every eviction for longer than the drain's time-out
	RebootStall  bool // logind refuses a reboot request, or the machine stays up past reboot.timeout
	Orders       bool // the operator pauses the cluster, and holds nodes, for a while
	Settings     bool // the operator changes the cluster's settings mid-roll, once to a bad value
}

// Names lists the faults that are on.
func (f FaultSet) Names() []string {
	var out []string
	for _, x := range []struct {
		on   bool
		name string
	}{
		{f.Crash, "crash"}, {f.LostReply, "lost-reply"}, {f.Outage, "outage"}, {f.WatchEnd, "watch-end"},
		{f.WatchLag, "watch-lag"}, {f.AdminEdits, "admin-edits"}, {f.NodeDelete, "node-delete"},
		{f.Relabel, "relabel"}, {f.Unplanned, "unplanned-reboot"}, {f.SlowKubelet, "slow-kubelet"},
		{f.Death, "death"}, {f.ClockOffsets, "clock-offsets"}, {f.Blocked, "blocked"}, {f.StuckBudget, "stuck-budget"},
		{f.RebootStall, "reboot-stall"}, {f.Orders, "orders"}, {f.Settings, "settings"},
	} {
		if x.on {
			out = append(out, x.name)
		}
	}
	return out
}

// Draw makes a run's options from its seed: a small cluster, a lock
// configuration, and each fault on with some probability.
func Draw(seed int64) Options {
	r := rand.New(rand.NewPCG(uint64(seed), 0xd4a3))
	o := Options{
		Seed: seed, Nodes: 3 + r.IntN(8), PodsPerNode: r.IntN(3),
		Concurrency: 1 + r.IntN(3), Mixed: r.IntN(4) == 0,
		NeedSpread:   Span{0, time.Duration(r.IntN(5)) * time.Minute},
		DownTime:     Span{20 * time.Second, 3 * time.Minute},
		KubeletDelay: Span{time.Second, 15 * time.Second},
		Deadline:     6 * time.Hour,
	}
	if r.IntN(3) > 0 {
		o.Zones = 2 + r.IntN(2)
		o.ZoneMax = 1 + r.IntN(2)
	}
	if r.IntN(8) == 0 {
		// A queue longer than the window of nodes that watch (16): the
		// ones further back read it now and then and watch one node.
		// Most nodes in one zone, so that the nodes ahead are held back
		// by their zone while a node further back, in a free zone, may go.
		o.Nodes, o.Zones, o.ZoneMax, o.Skewed = 18+r.IntN(23), 3, 1, r.IntN(2) == 0
	}
	if r.IntN(3) == 0 {
		o.ReleaseDelay = time.Duration(1+r.IntN(60)) * time.Second
	}
	p := func(x float64) bool { return r.Float64() < x }
	o.Faults = FaultSet{
		Crash: p(0.4), LostReply: p(0.3), Outage: p(0.25), WatchEnd: p(0.3), WatchLag: p(0.3),
		AdminEdits: p(0.3), NodeDelete: p(0.15), Relabel: p(0.1), Unplanned: p(0.25),
		SlowKubelet: p(0.3), Death: p(0.1), ClockOffsets: p(0.2),
		Blocked: p(0.2), StuckBudget: p(0.15), RebootStall: p(0.15),
	}
	// Drawn apart, after the others: the seeds drawn before it keep
	// their faults.
	o.Faults.Orders = p(0.2)
	o.Faults.Settings = p(0.2)
	if p(0.25) {
		o.DrainDelay = time.Duration(1+r.IntN(30)) * time.Second
	}
	if p(0.25) {
		o.RebootDelay = time.Duration(1+r.IntN(30)) * time.Second
	}
	if o.Faults.SlowKubelet {
		o.KubeletDelay = Span{time.Second, 3 * time.Minute}
	}
	if o.Faults.ClockOffsets {
		o.ClockSkew = 3 * time.Minute
	}
	return o
}

func (o Options) String() string {
	faults := strings.Join(o.Faults.Names(), ",")
	if faults == "" {
		faults = "none"
	}
	return fmt.Sprintf("seed %d: %d nodes, %d zones, concurrency %d, zone max %d, mixed %v, release delay %s, drain delay %s, reboot delay %s, faults %s",
		o.Seed, o.Nodes, o.Zones, o.Concurrency, o.ZoneMax, o.Mixed, o.ReleaseDelay, o.DrainDelay, o.RebootDelay, faults)
}

// Config is node i's configuration.
func (o Options) Config(w *World, i int) config.Config {
	c := config.Default()
	c.Sentinel.Period = config.Duration(time.Minute)
	c.Lock.Concurrency = o.Concurrency
	c.Lock.Groups = nil
	if o.ZoneMax > 0 {
		c.Lock.Groups = []config.GroupLimit{{Label: config.ZoneLabel, Max: o.ZoneMax}}
	}
	if o.Mixed {
		c.Lock.Concurrency = 1 + w.intn(o.Concurrency)
		if o.ZoneMax > 0 && w.chance(0.3) {
			c.Lock.Groups = nil
		}
	}
	c.Lock.ReleaseDelay = config.Duration(o.ReleaseDelay)
	c.Drain.Delay = config.Duration(o.DrainDelay)
	c.Reboot.Delay = config.Duration(o.RebootDelay)
	c.Drain.Timeout = config.Duration(10 * time.Minute)
	c.Reboot.Timeout = config.Duration(15 * time.Minute)
	return c
}

// ClockOffset is node i's clock offset from the API server's.
func (o Options) ClockOffset(w *World, i int) time.Duration {
	if o.ClockSkew == 0 {
		return 0
	}
	return w.draw(Span{-o.ClockSkew, o.ClockSkew})
}
