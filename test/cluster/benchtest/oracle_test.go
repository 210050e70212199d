package benchtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/test/cluster"
)

// The oracle is a lock that costs the API server nothing: one scheduler
// in the bench's own process hands out the slots the moment they are
// free, in the order the nodes asked, within the same limits (k, and the
// group limit per zone). Its roll makes only the requests any reboot tool
// makes (cordon, uncordon) and those the reboots themselves cause (the
// kubelets' status reports, their pod watches started again, the
// controllers'). What its roll does to the heartbeats is the floor no
// lock can go under on this harness. `make bench` runs it at 500 nodes;
// BENCH_STRATEGIES=oracle at any size.
type oracle struct {
	k, zoneMax int

	mu      sync.Mutex
	queue   []*oracleWait // in the order the nodes asked
	held    map[string]*oracleHold
	perZone map[string]int
	ended   []oracleSpan // every slot given back, used or not
}

type oracleWait struct {
	node, zone string
	granted    chan struct{}
}

type oracleHold struct {
	zone  string
	since time.Time
	boot  string // the boot the node asked for its reboot in
}

// oracleSpan is one slot from grant to release. A slot granted to a wait
// that was given up meanwhile is not used: it counts against the limits
// but is not one of the roll's slots.
type oracleSpan struct {
	node, zone string
	from, to   time.Time
	used       bool
}

func newOracle(k, zoneMax int) *oracle {
	return &oracle{k: k, zoneMax: zoneMax, held: map[string]*oracleHold{}, perZone: map[string]int{}}
}

// acquire waits for a slot for node in zone.
func (o *oracle) acquire(ctx context.Context, node, zone string) error {
	w := &oracleWait{node: node, zone: zone, granted: make(chan struct{})}
	o.mu.Lock()
	o.queue = append(o.queue, w)
	o.grant()
	o.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		o.mu.Lock()
		defer o.mu.Unlock()
		select {
		case <-w.granted: // granted meanwhile: give it back unused
			o.releaseLocked(node, false)
		default:
			o.queue = slices.DeleteFunc(o.queue, func(x *oracleWait) bool { return x == w })
		}
		return ctx.Err()
	}
}

// grant hands out every free slot, to the first in the queue that fits.
// o.mu is held.
func (o *oracle) grant() {
	o.queue = slices.DeleteFunc(o.queue, func(w *oracleWait) bool {
		if len(o.held) >= o.k || o.perZone[w.zone] >= o.zoneMax {
			return false
		}
		o.held[w.node] = &oracleHold{zone: w.zone, since: time.Now()}
		o.perZone[w.zone]++
		close(w.granted)
		return true
	})
}

// rebooting records the boot node asks its reboot in.
func (o *oracle) rebooting(node, boot string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := o.held[node]; h != nil {
		h.boot = boot
	}
}

// holding returns the boot node holds its slot from, if it holds one.
func (o *oracle) holding(node string) (boot string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.held[node]
	if h == nil {
		return "", false
	}
	return h.boot, true
}

func (o *oracle) release(node string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.releaseLocked(node, true)
}

func (o *oracle) releaseLocked(node string, used bool) {
	h := o.held[node]
	if h == nil {
		return
	}
	delete(o.held, node)
	o.perZone[h.zone]--
	o.ended = append(o.ended, oracleSpan{node: node, zone: h.zone, from: h.since, to: time.Now(), used: used})
	o.grant()
}

// slots, check and stop make the oracle its own slotWatch.
func (o *oracle) slots(context.Context) ([]slot, int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var done []slot
	for _, s := range o.ended {
		if s.used {
			done = append(done, slot{node: s.node, held: s.from, released: s.to})
		}
	}
	return done, len(o.held), nil
}

// check replays the slots' spans, not grant's counters: a grant that
// broke a limit shows as more spans open at one instant than the limit
// allows. A release and a grant at the same instant are a hand-off, the
// release first.
func (o *oracle) check() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	type edge struct {
		at   time.Time
		zone string
		d    int
	}
	var edges []edge
	for _, s := range o.ended {
		// A slot held for no time at all still held it: its release
		// must not sort before its own grant.
		to := s.to
		if !to.After(s.from) {
			to = s.from.Add(time.Nanosecond)
		}
		edges = append(edges, edge{s.from, s.zone, +1}, edge{to, s.zone, -1})
	}
	for _, h := range o.held {
		edges = append(edges, edge{h.since, h.zone, +1})
	}
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	var problems []string
	all, perZone := 0, map[string]int{}
	for _, e := range edges {
		all += e.d
		perZone[e.zone] += e.d
		if e.d > 0 && (all > o.k || perZone[e.zone] > o.zoneMax) {
			problems = append(problems, fmt.Sprintf("%s: %d held, %d in %s", e.at.Format(time.StampMilli), all, perZone[e.zone], e.zone))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("oracle: %d limit(s) broken: %v", len(problems), problems)
	}
	return nil
}

func (o *oracle) stop() {}

// oracleNode is one host's side: cordon, hold, reboot; after the boot,
// uncordon and give the slot back. The bench's nodes start schedulable,
// so it uncordons without recording that.
type oracleNode struct {
	o       *oracle
	h       *cluster.SimHost
	client  kubernetes.Interface
	zone    string
	hold    time.Duration
	started func()
}

func (n *oracleNode) run(ctx context.Context) error {
	boot := n.h.BootID()
	was, held := n.o.holding(n.h.Name)
	if held && was != "" && was != boot {
		if _, err := setUnschedulable(ctx, n.client, n.h.Name, false); err != nil {
			return err
		}
		n.o.release(n.h.Name)
		held = false
	}
	n.started()
	if err := n.h.AwaitRebootRequired(ctx); err != nil {
		return err
	}
	if !held { // else started again before its reboot: it keeps its slot
		if err := n.o.acquire(ctx, n.h.Name, n.zone); err != nil {
			return err
		}
	}
	if _, err := setUnschedulable(ctx, n.client, n.h.Name, true); err != nil {
		return err
	}
	if err := sleep(ctx, n.hold); err != nil {
		return err
	}
	n.o.rebooting(n.h.Name, boot)
	return reboot(ctx, n.h)
}

func startOracle(tb testing.TB, f *fleet, c rollCase) slotWatch {
	o := newOracle(c.K, c.GroupMax())
	for i, h := range f.hosts {
		client, err := f.meter.client(h.Config, userAgent(oracleLock), kube.Tune)
		if err != nil {
			tb.Fatal(err)
		}
		n := &oracleNode{o: o, h: h, client: client, zone: c.zone(i), hold: c.Hold, started: func() { f.started.Add(1) }}
		h.AddService("kured-host", f.service(n.run))
	}
	return o
}
