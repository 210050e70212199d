package benchtest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/queue"
	"github.com/kured-host/kured-host/test/cluster"
)

const zoneLabel = "topology.kubernetes.io/zone"

// The strategies, also the user agents their requests are counted by.
const (
	slotLock   = "kured-host"
	kuredStyle = "kured-style"
	oracleLock = "oracle" // oracle_test.go
)

func userAgent(strategy string) string { return strategy + "-bench" }

// rollCase is one roll: every node needs a reboot at once.
type rollCase struct {
	Nodes, K, Zones int
	// Hold is the "drain", Down the reboot (down until back Ready): T,
	// the simulated time per node, is their sum.
	Hold, Down time.Duration
	// Period is the kured-style baseline's polling period.
	Period time.Duration
}

func (c rollCase) T() time.Duration { return c.Hold + c.Down }

// GroupMax is the per-zone limit: ⌈k/zones⌉, so that the zones together
// allow k at once and the group limit is not the bottleneck.
func (c rollCase) GroupMax() int { return (c.K + c.Zones - 1) / c.Zones }

func (c rollCase) zone(i int) string { return fmt.Sprintf("zone-%c", 'a'+i%c.Zones) }

// Rounds is a lower bound on the rounds of T any schedule needs: ⌈N/k⌉,
// or more if a zone's nodes need more at GroupMax per round (reached in
// these cases, where the zones differ by one node at most).
func (c rollCase) Rounds() int {
	r := (c.Nodes + c.K - 1) / c.K
	for z := range c.Zones {
		n := c.Nodes / c.Zones
		if z < c.Nodes%c.Zones {
			n++
		}
		r = max(r, (n+c.GroupMax()-1)/c.GroupMax())
	}
	return r
}

func (c rollCase) Ideal() time.Duration { return time.Duration(c.Rounds()) * c.T() }

func (c rollCase) String() string { return fmt.Sprintf("N=%d,k=%d", c.Nodes, c.K) }

// slot is one node's turn: when its slot was taken and given back, as an
// admin watch saw it.
type slot struct {
	node           string
	held, released time.Time
}

// result is one roll's figures (JSON under results/).
type result struct {
	Strategy    string  `json:"strategy"`
	Nodes       int     `json:"nodes"`
	Concurrency int     `json:"concurrency"`
	Zones       int     `json:"zones"`
	GroupLimit  int     `json:"groupLimit"`
	T           float64 `json:"tSeconds"`
	Period      float64 `json:"periodSeconds,omitempty"`
	// Makespan is the first sentinel to the last release; Ideal is
	// Rounds·T.
	Makespan float64 `json:"makespanSeconds"`
	Rounds   int     `json:"rounds"`
	Ideal    float64 `json:"idealSeconds"`
	Ratio    float64 `json:"ratio"`
	// SlotMean is the mean time a node held its slot (T plus the
	// simulated host's and the daemon's own overhead); SlotRatio is the
	// makespan against Rounds·SlotMean, what the queue itself loses.
	SlotMean   float64 `json:"slotMeanSeconds"`
	SlotRatio  float64 `json:"slotRatio"`
	HandoffP50 float64 `json:"handoffP50Seconds"`
	HandoffP99 float64 `json:"handoffP99Seconds"`
	// API requests of the strategy's clients between the first sentinel
	// and the last release, from the API server's audit log.
	Requests       int            `json:"requests"`
	PerAcquisition float64        `json:"requestsPerAcquisition"`
	PeakPerSecond  int            `json:"peakPerSecond"`
	ByVerb         map[string]int `json:"byVerb"`
	PeakByVerb     map[string]int `json:"peakPerSecondByVerb"`
	// BusiestSecond is what the strategy asked in its busiest second
	// (PeakPerSecond), by verb and selector, and when that second began
	// after the first sentinel.
	BusiestSecond      map[string]int `json:"busiestSecondByKind"`
	BusiestSecondAfter float64        `json:"busiestSecondAfterSeconds"`
	ReadsPerNode       float64        `json:"readsPerNode"`
	// QueueReadsPerNode are the Lists of the queue: of every claimed
	// node (label selector kured-host.dev/claim alone), or of the waiting
	// claims ahead of a place (claim.AheadSelector): the reads whose size
	// grows with the queue.
	QueueReadsPerNode float64 `json:"queueReadsPerNode"`
	// Unfinished says how far a roll got that did not finish in time.
	Unfinished string `json:"unfinished,omitempty"`
	// Conflicts are writes refused because the object had changed (409).
	Conflicts int `json:"conflicts"`
	// ConflictsAfter counts the conflicts by the writer's request before
	// the refused write (a watch not counted), to tell where in the cycle
	// the writes meet another writer.
	ConflictsAfter map[string]int `json:"conflictsAfter"`
	// Throttled are requests the API server's priority and fairness
	// turned away (429, retried by client-go after a second).
	Throttled int `json:"throttled"`
	// What the strategy's clients received in that window: every reply
	// (MB, decompressed), and on watches.
	ReceivedMB float64 `json:"receivedMB"`
	// ReceivedByKind is ReceivedMB by kind of request: verb, what, and
	// the selectors.
	ReceivedByKind map[string]float64 `json:"receivedMBByKind"`
	WatchEvents    int64              `json:"watchEvents"`
	WatchMB        float64            `json:"watchMB"`
	// CPU used during the roll by the test process and the control
	// plane's own (machineNote); the test process's resident memory
	// before the hosts were added and at its peak during the roll, its
	// peak Go heap in use, and VmHWM.
	CPUSeconds float64 `json:"cpuSeconds"`
	// ServerCPUSeconds is the control plane's share of CPUSeconds (its
	// own process; zero with BENCH_ONE_PROCESS): what the roll cost the
	// API server, etcd and the controllers, against the oracle's.
	ServerCPUSeconds float64 `json:"serverCpuSeconds"`
	RSSBeforeMB      float64 `json:"rssBeforeMB"`
	RSSPeakMB        float64 `json:"rssPeakMB"`
	HeapPeakMB       float64 `json:"heapPeakMB"`
	HWMMB            float64 `json:"vmHWMMB"`
	// The kubelet stand-ins' heartbeats (Lease renewals, status
	// reports): the cluster idle before the roll (N ≥ 200 only: 12 s),
	// the whole roll, and the roll's busiest second (by the strategy's
	// requests); those the API server turned away (429, audit log) and
	// those that failed.
	HeartbeatIdle      latency `json:"heartbeatIdle"`
	HeartbeatRoll      latency `json:"heartbeatRoll"`
	HeartbeatBusy      latency `json:"heartbeatBusiestSecond"`
	HeartbeatThrottled int     `json:"heartbeatThrottled"`
	HeartbeatFailed    int     `json:"heartbeatFailed"`
	// HeartbeatRollByKind splits the roll's heartbeats: the Lease
	// renewals, which idle has too, and the status reports that the
	// reboots themselves cause (NotReady at shutdown, Ready in the new
	// boot), which idle has none of.
	HeartbeatRollByKind map[string]latency `json:"heartbeatRollByKind"`
	// HeartbeatServer* are the heartbeats' writes (Lease updates, Node
	// status patches) as the API server timed them, from receiving each
	// to its response complete (audit log), over the same three
	// stretches: what the server's load adds, without the time the
	// stand-ins themselves wait for this machine's cores.
	HeartbeatServerIdle latency `json:"heartbeatServerIdle"`
	HeartbeatServerRoll latency `json:"heartbeatServerRoll"`
	HeartbeatServerBusy latency `json:"heartbeatServerBusiestSecond"`
	// The roll's heartbeats split where kured-host's join spread ends
	// (queue.JoinSpread after the first sentinel, JoinSeconds), the same
	// cut for every strategy: the burst of joins against the rest of
	// the roll, hand-offs and reboots. Round trip, then server time.
	JoinSeconds              float64 `json:"joinSeconds"`
	HeartbeatJoin            latency `json:"heartbeatJoin"`
	HeartbeatAfterJoin       latency `json:"heartbeatAfterJoin"`
	HeartbeatServerJoin      latency `json:"heartbeatServerJoin"`
	HeartbeatServerAfterJoin latency `json:"heartbeatServerAfterJoin"`
	// The machine over the same three stretches: CPU and the heartbeat
	// level's queue waits (apf_test.go).
	LoadIdle load `json:"loadIdle"`
	LoadRoll load `json:"loadRoll"`
	LoadBusy load `json:"loadBusiestSecond"`
}

// latency is a sample of request times.
type latency struct {
	N                   int
	P50ms, P99ms, MaxMs float64
}

func latencyOf(bs []cluster.Heartbeat) latency {
	ds := make([]time.Duration, len(bs))
	for i, b := range bs {
		ds[i] = b.Took
	}
	return latencyOfDurations(ds)
}

func latencyOfDurations(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	slices.Sort(ds)
	pct := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1)+0.5)]) / 1e6 }
	return latency{N: len(ds), P50ms: pct(0.5), P99ms: pct(0.99), MaxMs: pct(1)}
}

func (l latency) String() string {
	if l.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f / %.0f ms (%d)", l.P50ms, l.P99ms, l.N)
}

var rollSeq atomic.Int64

// slotWatch tells which slots were taken and given back so far, and how
// many are held now, as an admin watch saw them.
type slotWatch interface {
	slots(ctx context.Context) (done []slot, held int, err error)
	// check returns the limits broken at any revision.
	check() error
	stop()
}

// fleet is one roll's hosts and what their services report.
type fleet struct {
	hosts   []*cluster.SimHost
	meter   *meter
	started atomic.Int64
	fail    chan error
}

// service runs f as a host's daemon; an error other than the end of its
// boot fails the roll.
func (f *fleet) service(run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		err := run(ctx)
		if err != nil && ctx.Err() == nil {
			select {
			case f.fail <- err:
			default:
			}
		}
		return err
	}
}

// roll runs one case with one strategy: N fresh hosts in 3 zones, each
// running the strategy as its "kured-host" service; every sentinel is set
// at once; it waits until every node has rebooted and given its slot
// back (or 2·ideal + 2 min have passed: the row then says how far it
// got), checks the limits at every revision, and measures.
func roll(tb testing.TB, c rollCase, strategy string) result {
	tb.Helper()
	budget := 2*c.Ideal() + 2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), budget+15*time.Minute)
	defer cancel()
	run := rollSeq.Add(1)
	prefix := fmt.Sprintf("r%d-%c", run, map[string]rune{slotLock: 'h', kuredStyle: 's', oracleLock: 'o'}[strategy])

	memBefore := readMem()
	f := &fleet{hosts: addHosts(tb, ctx, prefix, c), meter: &meter{}, fail: make(chan error, 1)}
	defer removeHosts(f.hosts)
	var w slotWatch
	switch strategy {
	case slotLock:
		w = startSlotLock(tb, ctx, f, c)
	case kuredStyle:
		w = startKuredStyle(tb, ctx, f, c, prefix, run)
	case oracleLock:
		w = startOracle(tb, f, c)
	default:
		tb.Fatalf("no strategy %q", strategy)
	}
	defer w.stop()
	settle(tb, ctx, f, c, strategy)
	return rollOnce(tb, ctx, f, w, c, strategy, budget, memBefore)
}

// settle waits until every daemon runs and has settled, as long before a
// kernel update: the kured-style pollers on their regular ticks.
func settle(tb testing.TB, ctx context.Context, f *fleet, c rollCase, strategy string) {
	tb.Helper()
	if !waitFor(tb, ctx, f, func() bool { return f.started.Load() >= int64(len(f.hosts)) }) {
		tb.Fatalf("daemons not started: %s", where(f.hosts))
	}
	d := 200 * time.Millisecond
	if strategy == kuredStyle {
		d = c.Period*3/2 + 100*time.Millisecond
	}
	if err := sleep(ctx, d); err != nil {
		tb.Fatal(err)
	}
}

// rollOnce sets every sentinel, waits for the roll (at most budget) and
// measures it.
func rollOnce(tb testing.TB, ctx context.Context, f *fleet, w slotWatch, c rollCase, strategy string,
	budget time.Duration, memBefore memStats) result {
	tb.Helper()
	var idle []cluster.Heartbeat
	var idleLoad load
	var idleFrom, idleTo time.Time
	if c.Nodes >= 200 {
		// Every stand-in renews its Lease every 10 s.
		idleFrom = time.Now()
		fromLoad := sampleLoad()
		if err := sleep(ctx, 12*time.Second); err != nil {
			tb.Fatal(err)
		}
		idleTo = time.Now()
		idle, idleLoad = cp.Heartbeats(idleFrom, idleTo), loadBetween(fromLoad, sampleLoad())
	}
	sampler := startMemSampler()
	loads := startLoadSampler()
	cpuBefore := cpuTime()
	watchBefore := f.meter.snapshot()
	start := time.Now()
	if path := os.Getenv("BENCH_SERVER_PROFILE"); path != "" {
		go serverProfile(ctx, cp, path, 90*time.Second)
	}
	for _, h := range f.hosts {
		if err := h.SetRebootRequired(true); err != nil {
			tb.Fatal(err)
		}
	}
	slots, finished := waitRolled(tb, ctx, f, w, start.Add(budget))
	watch := f.meter.snapshot().sub(watchBefore)
	cpu := cpuTime().sub(cpuBefore)
	mem := sampler.stop()
	samples := loads.stop()
	if err := w.check(); err != nil {
		tb.Fatal(err)
	}
	end := start
	for _, s := range slots {
		end = later(end, s.released)
	}
	all, err := audit.Requests(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	reqs := all.Between(start, end).Where(func(r cluster.Request) bool { return r.UserAgent == userAgent(strategy) })
	if os.Getenv("BENCH_TIMELINE") != "" {
		timeline(start, slots)
	}
	if os.Getenv("BENCH_CONFLICTS") != "" {
		conflictTrace(start, reqs, all)
	}
	if os.Getenv("BENCH_HEARTBEATS") != "" {
		heartbeatTrace(start, cp.Heartbeats(start, end), reqs)
	}
	r := measure(c, strategy, start, end, slots, reqs, watch, cpu, memBefore, mem)
	heartbeats(&r, idle, cp.Heartbeats(start, end), reqs, all.Between(start, end))
	serverHeartbeats(&r, all.Between(idleFrom, idleTo), all.Between(start, end), reqs)
	joined := start.Add(queue.JoinSpread(c.Nodes))
	r.JoinSeconds = queue.JoinSpread(c.Nodes).Seconds()
	r.HeartbeatJoin, r.HeartbeatAfterJoin = latencyOf(cp.Heartbeats(start, joined)), latencyOf(cp.Heartbeats(joined, end))
	r.HeartbeatServerJoin = serverHeartbeatTimes(r.Strategy, all.Between(start, joined.Add(-1)))
	r.HeartbeatServerAfterJoin = serverHeartbeatTimes(r.Strategy, all.Between(joined, end))
	_, busiest := reqs.PeakPerSecond()
	r.LoadIdle, r.LoadRoll = idleLoad, loadAround(samples, start, end)
	r.LoadBusy = loadAround(samples, busiest, busiest.Add(time.Second))
	if !finished {
		// The makespan is at least the budget.
		r.Makespan, r.Ratio = budget.Seconds(), budget.Seconds()/r.Ideal
		r.Unfinished = fmt.Sprintf("not done after %s: %s", budget.Round(time.Second), where(f.hosts))
		tb.Logf("%s, %s: %s", c, strategy, r.Unfinished)
	}
	return r
}

// waitRolled waits until every host has rebooted and every slot is back,
// or until the deadline; it returns the slots given back.
func waitRolled(tb testing.TB, ctx context.Context, f *fleet, w slotWatch, deadline time.Time) ([]slot, bool) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var slots []slot
	finished := waitFor(tb, dctx, f, func() bool {
		for _, h := range f.hosts {
			if h.Boots() < 2 {
				return false
			}
		}
		s, held, err := w.slots(dctx)
		if err != nil {
			return false
		}
		slots = s
		return held == 0 && len(s) >= len(f.hosts)
	})
	if !finished {
		s, _, err := w.slots(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		slots = s
	}
	return slots, finished
}

// startSlotLock runs the slot lock's driver on every host, with the
// auditor watching.
func startSlotLock(tb testing.TB, ctx context.Context, f *fleet, c rollCase) slotWatch {
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	names := map[string]bool{}
	for _, h := range f.hosts {
		names[h.Name] = true
	}
	a.Scope = func(n string) bool { return names[n] }
	limits := claim.Limits{Concurrency: c.K, Groups: []claim.GroupLimit{{Label: zoneLabel, Max: c.GroupMax()}}}
	for _, h := range f.hosts {
		client, err := f.meter.client(h.Config, userAgent(slotLock), kube.Tune)
		if err != nil {
			tb.Fatal(err)
		}
		meta, err := f.meter.metadata(h.Config, userAgent(slotLock), kube.Tune)
		if err != nil {
			tb.Fatal(err)
		}
		d := &lockDriver{h: h, client: client, meta: meta, limits: limits, hold: c.Hold, started: func() { f.started.Add(1) }}
		h.AddService("kured-host", f.service(d.run))
	}
	return auditorWatch{a: a, limits: limits}
}

type auditorWatch struct {
	a      *cluster.Auditor
	limits claim.Limits
}

func (w auditorWatch) slots(ctx context.Context) ([]slot, int, error) {
	if err := w.a.Sync(ctx); err != nil {
		return nil, 0, err
	}
	var out []slot
	held := 0
	for _, x := range w.a.Acquisitions() {
		if !x.ReleasedOK {
			held++
			continue
		}
		out = append(out, slot{node: x.Node, held: x.Held.Seen, released: x.Released.Seen})
	}
	return out, held, nil
}

func (w auditorWatch) check() error { return w.a.Check(w.limits) }
func (w auditorWatch) stop()        { w.a.Stop() }

// startKuredStyle creates the lock DaemonSet and runs kured's loop on
// every host, with its own auditor watching the DaemonSet.
func startKuredStyle(tb testing.TB, ctx context.Context, f *fleet, c rollCase, prefix string, run int64) slotWatch {
	ds := prefix + "-kured"
	obj, err := cp.DaemonSetObject(ctx, kuredNamespace, ds, map[string]string{"app": ds})
	if err != nil {
		tb.Fatal(err)
	}
	ka, err := startKuredAuditor(ctx, obj, c.K, c.GroupMax())
	if err != nil {
		tb.Fatal(err)
	}
	ka.ds = ds
	for i, h := range f.hosts {
		client, err := kuredClient(f.meter, h.Name)
		if err != nil {
			tb.Fatal(err)
		}
		k := &kuredNode{h: h, client: client, ds: ds, zone: c.zone(i), maxOwners: c.K, zoneMax: c.GroupMax(),
			period: c.Period, hold: c.Hold, rand: rand.New(rand.NewPCG(uint64(run), uint64(i))),
			started: func() { f.started.Add(1) }}
		h.AddService("kured-host", f.service(k.run))
	}
	return ka
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// measure turns one roll's record into its figures.
func measure(c rollCase, strategy string, start, end time.Time, slots []slot, reqs cluster.Requests,
	watch meterSnapshot, cpu cpuTimes, before memStats, peak memStats) result {
	r := result{
		Strategy: strategy, Nodes: c.Nodes, Concurrency: c.K, Zones: c.Zones, GroupLimit: c.GroupMax(),
		T: c.T().Seconds(), Makespan: end.Sub(start).Seconds(), Rounds: c.Rounds(), Ideal: c.Ideal().Seconds(),
		Requests: len(reqs), ByVerb: reqs.Count(cluster.Verb), PeakByVerb: map[string]int{},
		ReceivedMB: float64(watch.all) / 1e6, WatchEvents: watch.events, WatchMB: float64(watch.bytes) / 1e6,
		CPUSeconds: cpu.all.Seconds(), ServerCPUSeconds: cpu.server.Seconds(), RSSBeforeMB: mb(before.rss), RSSPeakMB: mb(peak.rss), HeapPeakMB: mb(peak.heap), HWMMB: mb(peak.hwm),
	}
	if strategy == kuredStyle {
		r.Period = c.Period.Seconds()
	}
	r.ReceivedByKind = map[string]float64{}
	for k, b := range watch.byKind {
		r.ReceivedByKind[k] = float64(b) / 1e6
	}
	r.Ratio = r.Makespan / r.Ideal
	var busiest time.Time
	r.PeakPerSecond, busiest = reqs.PeakPerSecond()
	r.BusiestSecond = reqs.Where(func(x cluster.Request) bool {
		return !x.Time.Before(busiest) && x.Time.Before(busiest.Add(time.Second))
	}).Count(requestKind)
	r.BusiestSecondAfter = busiest.Sub(start).Seconds()
	for verb := range r.ByVerb {
		r.PeakByVerb[verb], _ = reqs.Where(func(x cluster.Request) bool { return x.Verb == verb }).PeakPerSecond()
	}
	if len(slots) > 0 {
		r.PerAcquisition = float64(len(reqs)) / float64(len(slots))
		var held time.Duration
		for _, s := range slots {
			held += s.released.Sub(s.held)
		}
		r.SlotMean = (held / time.Duration(len(slots))).Seconds()
		r.SlotRatio = r.Makespan / (float64(r.Rounds) * r.SlotMean)
	}
	r.ReadsPerNode = float64(reqs.Reads()) / float64(c.Nodes)
	r.QueueReadsPerNode = float64(len(reqs.Where(queueRead))) / float64(c.Nodes)
	r.Conflicts = len(reqs.Where(func(x cluster.Request) bool { return x.Code == 409 }))
	r.ConflictsAfter = map[string]int{}
	last := map[string]cluster.Request{}
	for _, x := range reqs {
		if x.Code == 409 {
			before := "nothing since the first sentinel"
			if p, ok := last[x.User]; ok {
				before = fmt.Sprintf("%s (%d)", requestKind(p), p.Code)
			}
			r.ConflictsAfter[before]++
		}
		if x.Verb != "watch" {
			last[x.User] = x
		}
	}
	r.Throttled = len(reqs.Where(func(x cluster.Request) bool { return x.Code == 429 }))
	p50, p99 := handoffs(slots)
	r.HandoffP50, r.HandoffP99 = p50.Seconds(), p99.Seconds()
	return r
}

// requestKind is a request's verb and selectors, one kind whatever the
// place a selector names (as the meter's kindOf).
func requestKind(r cluster.Request) string {
	k := r.Verb + " " + r.Resource
	if r.Subresource != "" {
		k += "/" + r.Subresource
	}
	if u, err := url.Parse(r.URI); err == nil {
		q := u.Query()
		if v := q.Get("labelSelector"); v != "" {
			k += " label=" + placeValue.ReplaceAllString(v, "$1…")
		}
		if v := q.Get("fieldSelector"); v != "" {
			k += " field=" + strings.SplitN(v, "=", 2)[0]
		}
		if q.Get("limit") != "" {
			k += " limit"
		}
	}
	return k
}

// queueRead is a List of every claimed node, or of the waiting claims
// ahead of a place.
func queueRead(r cluster.Request) bool {
	if r.Verb != "list" {
		return false
	}
	u, err := url.Parse(r.URI)
	if err != nil {
		return false
	}
	sel := u.Query().Get("labelSelector")
	return sel == claim.Label || strings.HasPrefix(sel, claim.SinceLabel+"<")
}

// heartbeats adds the stand-ins' heartbeat figures to r: idle, during
// the roll, in the second the strategy's requests peaked, and those
// throttled (429 on a Lease or a Node status, from the audit log of the
// roll, all) or failed.
func heartbeats(r *result, idle, roll []cluster.Heartbeat, reqs, all cluster.Requests) {
	r.HeartbeatIdle, r.HeartbeatRoll = latencyOf(idle), latencyOf(roll)
	_, at := reqs.PeakPerSecond()
	var busy []cluster.Heartbeat
	for _, b := range roll {
		if !b.At.Before(at) && b.At.Before(at.Add(time.Second)) {
			busy = append(busy, b)
		}
		if b.Err != nil {
			r.HeartbeatFailed++
		}
	}
	r.HeartbeatBusy = latencyOf(busy)
	r.HeartbeatRollByKind = map[string]latency{}
	for _, kind := range []string{"lease", "status"} {
		r.HeartbeatRollByKind[kind] = latencyOf(slices.DeleteFunc(slices.Clone(roll), func(b cluster.Heartbeat) bool { return b.Kind != kind }))
	}
	if len(busy) == 0 && len(roll) > 0 {
		fmt.Fprintf(os.Stderr, "no heartbeat in the busiest second %s; the roll's from %s to %s\n",
			at.Format(time.RFC3339Nano), roll[0].At.Format(time.RFC3339Nano), roll[len(roll)-1].At.Format(time.RFC3339Nano))
	}
	r.HeartbeatThrottled = len(all.Where(func(x cluster.Request) bool {
		return x.Code == 429 && heartbeatRequest(x, r.Strategy)
	}))
}

// heartbeatRequest tells the kubelet stand-ins' requests for their
// heartbeats (Leases, Node status, by node identities) from the
// strategy's, which share the identities.
func heartbeatRequest(x cluster.Request, strategy string) bool {
	return strings.HasPrefix(x.User, "system:node:") && x.UserAgent != userAgent(strategy) &&
		(x.Resource == "leases" || (x.Resource == "nodes" && x.Subresource == "status"))
}

// serverHeartbeats adds the heartbeats' writes as the API server timed
// them: idle, during the roll and in the second the strategy's requests
// peaked: the Lease updates and Node status patches.
func serverHeartbeats(r *result, idle, roll, reqs cluster.Requests) {
	_, at := reqs.PeakPerSecond()
	r.HeartbeatServerIdle, r.HeartbeatServerRoll = serverHeartbeatTimes(r.Strategy, idle), serverHeartbeatTimes(r.Strategy, roll)
	r.HeartbeatServerBusy = serverHeartbeatTimes(r.Strategy, roll.Between(at, at.Add(time.Second-1)))
}

// serverHeartbeatTimes is the server's time for the heartbeats' writes
// among rs.
func serverHeartbeatTimes(strategy string, rs cluster.Requests) latency {
	var ds []time.Duration
	for _, x := range rs {
		if heartbeatRequest(x, strategy) && (x.Verb == "update" || x.Verb == "patch") {
			ds = append(ds, x.Took)
		}
	}
	return latencyOfDurations(ds)
}

// handoffs are the times from a release to the next slot taken (as
// BenchmarkHandoff in locktest measures them): for each slot taken after
// the first release, the time since the latest release before it.
func handoffs(slots []slot) (p50, p99 time.Duration) {
	var releases []time.Time
	for _, s := range slots {
		releases = append(releases, s.released)
	}
	slices.SortFunc(releases, time.Time.Compare)
	var hs []time.Duration
	for _, s := range slots {
		i := sort.Search(len(releases), func(i int) bool { return !releases[i].Before(s.held) })
		if i == 0 {
			continue // among the first k: no release before it
		}
		hs = append(hs, s.held.Sub(releases[i-1]))
	}
	if len(hs) == 0 {
		return 0, 0
	}
	slices.Sort(hs)
	pct := func(p float64) time.Duration { return hs[int(p*float64(len(hs)-1)+0.5)] }
	return pct(0.5), pct(0.99)
}

// waitFor polls done until it is true (true), or until ctx ends (false);
// a service's failure fails the test.
func waitFor(tb testing.TB, ctx context.Context, f *fleet, done func() bool) bool {
	tb.Helper()
	for !done() {
		select {
		case err := <-f.fail:
			tb.Fatal(err)
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return true
}

// where summarises the hosts: how many have rebooted, and the claims on
// them.
func where(hosts []*cluster.SimHost) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rebooted := 0
	for _, h := range hosts {
		if h.Boots() >= 2 {
			rebooted++
		}
	}
	list, err := cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: claim.Label})
	if err != nil {
		return err.Error()
	}
	mine := map[string]bool{}
	for _, h := range hosts {
		mine[h.Name] = true
	}
	claims := map[string][]string{}
	for _, n := range list.Items {
		if mine[n.Name] {
			st := n.Labels[claim.Label]
			claims[st] = append(claims[st], n.Name)
		}
	}
	out := fmt.Sprintf("%d of %d hosts rebooted", rebooted, len(hosts))
	for st, names := range claims {
		slices.Sort(names)
		out += fmt.Sprintf("; %d %s %v", len(names), st, names[:min(len(names), 8)])
	}
	return out
}

// kuredClient is one kured pod's client: its own certificate, with
// admin rights (kured's ServiceAccount may update its DaemonSet; a node
// identity may not write a shared object).
func kuredClient(m *meter, node string) (kubernetes.Interface, error) {
	certPEM, keyPEM, err := cp.CA.ClientCert("kured-"+node, []string{"system:masters"}, time.Hour)
	if err != nil {
		return nil, err
	}
	return m.client(&rest.Config{Host: cp.Server,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.ServerCA, CertData: certPEM, KeyData: keyPEM}}, userAgent(kuredStyle),
		// JSON, client-go's default, as kured's client; the same rate
		// limit as kured-host's, so that only the strategy differs.
		func(c *rest.Config) { c.QPS, c.Burst = 20, 40 })
}

// addHosts adds c.Nodes hosts, a few at a time, spread over the zones.
func addHosts(tb testing.TB, ctx context.Context, prefix string, c rollCase) []*cluster.SimHost {
	tb.Helper()
	hosts := make([]*cluster.SimHost, c.Nodes)
	errs := make(chan error, c.Nodes)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				h, err := cp.AddHost(ctx, cluster.HostOptions{
					Name:     fmt.Sprintf("%s-%03d", prefix, i),
					Labels:   map[string]string{zoneLabel: c.zone(i)},
					DownTime: c.Down,
					// The daemons call SimHost.Reboot: no polling for
					// RebootCommand (8 % of the CPU at 200 nodes).
					NoAutoReboot: true,
				})
				if err != nil {
					errs <- err
					continue
				}
				hosts[i] = h
			}
		})
	}
	for i := range c.Nodes {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		removeHosts(hosts)
		tb.Fatal(err)
	}
	return hosts
}

func removeHosts(hosts []*cluster.SimHost) {
	next := make(chan *cluster.SimHost)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for h := range next {
				cp.RemoveHost(context.Background(), h)
			}
		})
	}
	for _, h := range hosts {
		if h != nil {
			next <- h
		}
	}
	close(next)
	wg.Wait()
}

// timeline prints each slot, taken and given back, from the start
// (BENCH_TIMELINE=1).
func timeline(start time.Time, slots []slot) {
	slots = slices.Clone(slots)
	slices.SortFunc(slots, func(a, b slot) int { return a.held.Compare(b.held) })
	for _, s := range slots {
		fmt.Fprintf(os.Stderr, "%s %7.3fs %7.3fs\n", s.node, s.held.Sub(start).Seconds(), s.released.Sub(start).Seconds())
	}
}

// conflictTrace prints, for the first few writes refused with a conflict,
// every request on the writer's Node around it (by anyone), so that the
// other writer shows (BENCH_CONFLICTS=1).
func conflictTrace(start time.Time, reqs, all cluster.Requests) {
	shown := 0
	for _, x := range reqs {
		if x.Code != 409 || shown == 3 {
			continue
		}
		shown++
		fmt.Fprintf(os.Stderr, "conflict: %s %s at %.3f s\n", x.User, requestKind(x), x.Time.Sub(start).Seconds())
		for _, y := range all {
			if y.Resource == "nodes" && y.Name == x.Name && !y.Read() && y.Time.Before(x.Time.Add(time.Second)) {
				fmt.Fprintf(os.Stderr, "  %.3f s %s %s %d\n", y.Time.Sub(start).Seconds(), y.User, requestKind(y), y.Code)
			}
		}
	}
}

// heartbeatTrace prints, for each second of the roll that had a heartbeat
// over 50 ms, its heartbeats' p50 and max and the strategy's requests
// that second, so that slow heartbeats can be matched to what the
// strategy did (BENCH_HEARTBEATS=1).
func heartbeatTrace(start time.Time, beats []cluster.Heartbeat, reqs cluster.Requests) {
	bySecond := map[int][]cluster.Heartbeat{}
	for _, b := range beats {
		s := int(b.At.Sub(start) / time.Second)
		bySecond[s] = append(bySecond[s], b)
	}
	asked := map[int]int{}
	for _, x := range reqs {
		asked[int(x.Time.Sub(start)/time.Second)]++
	}
	// The offset lets GODEBUG=gctrace=1's lines (seconds since the
	// process started) be matched to these.
	fmt.Fprintf(os.Stderr, "heartbeats: the roll began %.1f s after the process started\n", start.Sub(processStart).Seconds())
	for _, s := range slices.Sorted(maps.Keys(bySecond)) {
		l := latencyOf(bySecond[s])
		if l.MaxMs > 50 {
			fmt.Fprintf(os.Stderr, "heartbeats %4d s: %3d, p50 %4.0f ms, max %4.0f ms; %4d requests\n", s, l.N, l.P50ms, l.MaxMs, asked[s])
		}
	}
}

var processStart = time.Now()

// serverProfile writes the API server's CPU profile over the first d of
// the roll to path (BENCH_SERVER_PROFILE): where the control plane's
// cores go.
func serverProfile(ctx context.Context, cp *cluster.ControlPlane, path string, d time.Duration) {
	body, err := cp.Admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", fmt.Sprint(int(d.Seconds()))).Timeout(d + time.Minute).DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(path, body, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "the API server's profile: %v\n", err)
	}
}
