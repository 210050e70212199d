package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/cycle"
)

// The holder's cycle in the drive: once a node commits, its daemon decides
// each step with the real cycle.Next from what it knows (its claim as the
// world has it, its Node's cordon mark, this boot, the sentinel, what the
// process remembers), and the world carries the step out: the writes of
// daemon/*.go, a drain that takes a while, a reboot asked for that takes
// the machine down, a boot, a kubelet that reports Ready, the release
// and uncordon in one write. Under the faults drawn from the seed
// (dConfig.faults: daemons that crash while they wait, enter or hold and
// are started again, replies lost, an outage of the API server in one
// roll of three, machines that reboot unplanned before their reboot is
// asked for) the world checks the cycle's promises as
// they are broken: a slot released as done only after a reboot, a reboot
// asked for only drained and by the holder, evictions only from a
// cordoned node. The durations of a cycle are drawn within dConfig.hold,
// so a roll's bound is as before.

// dHost is a node's machine and its daemon's memory, beside its claim.
type dHost struct {
	boot      int
	needed    bool // the sentinel
	up        bool // the daemon runs (the machine is up, no crash)
	off       bool // the machine is down
	waitReady bool // the daemon waits for the kubelet's Ready to resume
	pending   bool // a reboot was asked for: the machine goes down next
	mark      bool // kured-host's cordon annotation
	unsched   bool
	undrained bool // pods that must be evicted before a reboot
	// The daemon's memory, lost in a crash or a reboot: Facts.Took and
	// Facts.Drained.
	took    *time.Time
	drained bool
	upSince time.Time // when the daemon last started, or read its claim after a lost reply
	gen     int       // the daemon's: a step of a daemon since gone is dropped
	steps   int       // cycle steps decided since the commit
	crashAt int       // the step at which the daemon crashes (0: none)
	downAt  int       // the step at which the machine reboots unplanned (0: none)
	crashes int
}

func bootName(b int) string { return fmt.Sprint("b", b) }

// facts are what the daemon gathers (daemon.facts).
func (n *dNode) facts() cycle.Facts {
	f := cycle.Facts{State: n.p.Claim.State, Claim: n.p.Claim, Took: n.h.took, CordonMark: n.h.mark,
		NotNeeded: !n.h.needed, Drained: n.h.drained}
	if n.p.Claim.State == claim.Holding {
		f.Boot = bootName(n.h.boot)
	}
	return f
}

// ours: the claim is still the slot the daemon's writes are conditional
// on (the one it took, or the one it read).
func (n *dNode) ours() bool {
	if n.p.Claim.State != claim.Holding || n.p.Claim.Acquired == nil {
		return false
	}
	return n.h.took == nil || n.p.Claim.Acquired.Equal(*n.h.took)
}

// startCycle: node i has just committed (its slot taken and its node
// cordoned in one write); its daemon goes on with the cycle, under the
// faults drawn for this slot.
func (w *dWorld) startCycle(i int) {
	n := w.nodes[i]
	n.h.took, n.h.steps = n.p.Claim.Acquired, 0
	n.h.crashAt, n.h.downAt = 0, 0
	if w.cfg.faults {
		if w.rnd.IntN(4) == 0 {
			n.h.crashAt = 1 + w.rnd.IntN(5)
		}
		if w.rnd.IntN(8) == 0 {
			n.h.downAt = 1 + w.rnd.IntN(3)
		}
	}
	w.cycleSoon(i, w.reply())
}

func (w *dWorld) cycleSoon(i int, t time.Time) {
	w.at(t, dEvent{node: i, kind: dCycle, gen: w.nodes[i].h.gen})
}

// within is a duration drawn between lo and hi hundredths of a slot's
// hold.
func (w *dWorld) within(lo, hi int64) time.Duration {
	h := int64(w.cfg.hold) / 100
	return time.Duration(lo*h + w.rnd.Int64N((hi-lo)*h+1))
}

// decide is one decision of node i's daemon: the step, or a fault in its
// place; the step's effect lands when its write does (stepDone).
func (w *dWorld) decide(i int) {
	n := w.nodes[i]
	n.h.steps++
	switch {
	case n.h.steps == n.h.crashAt:
		n.h.crashes++
		w.logf("%s: the daemon crashes", n.p.Name)
		w.forget(i)
		w.at(w.now.Add(w.within(3, 30)), dEvent{node: i, kind: dStarted, gen: n.h.gen})
		return
	case n.h.steps == n.h.downAt && !n.h.pending && n.p.Claim.BootID == bootName(n.h.boot):
		w.logf("%s: the machine reboots unplanned", n.p.Name)
		w.down(i)
		return
	}
	next := cycle.Next
	if w.cfg.next != nil {
		next = w.cfg.next
	}
	s := next(n.facts())
	if s.BeforeReboot() {
		n.h.took = n.p.Claim.Acquired
	}
	if s != cycle.Idle {
		w.logf("%s: %s", n.p.Name, s)
	}
	switch s {
	case cycle.Idle:
		if n.p.Claim.State == "" && !n.done {
			w.broken = fmt.Sprintf("%s: its claim went away before its reboot", n.p.Name)
		}
		return // nothing to do: the roll is over for this node
	case cycle.Resume:
		if !n.p.Ready {
			n.h.waitReady = true // healthy first: the kubelet's Ready brings the next look
			return
		}
	case cycle.StartDrain, cycle.Drain, cycle.RequestReboot, cycle.RecordBack:
	default:
		// No fault drawn here removes, rewrites or spoils a claim: no
		// other step may come.
		w.broken = fmt.Sprintf("%s: step %q from %+v", n.p.Name, s, n.facts())
		return
	}
	t := w.reply()
	if s == cycle.Drain {
		t = t.Add(w.within(5, 25))
	}
	w.at(t, dEvent{node: i, kind: dStepDone, gen: n.h.gen, step: s})
}

// stepDone: step s's writes land (each conditional on the claim still
// being the slot the daemon works on), and the world checks them.
func (w *dWorld) stepDone(i int, s cycle.Step) {
	n := w.nodes[i]
	ok := n.ours()
	switch s {
	case cycle.StartDrain:
		if ok {
			n.p.Claim.Phase = claim.PhaseDraining
		}
	case cycle.Drain:
		if ok {
			if !n.h.unsched {
				w.broken = fmt.Sprintf("%s: evicting from a schedulable node", n.p.Name)
			}
			n.h.undrained, n.h.drained = false, true
		}
	case cycle.RequestReboot:
		if ok {
			n.p.Claim.Phase = claim.PhaseRebooting
		}
		switch {
		case n.p.Claim.State != claim.Holding:
			w.broken = fmt.Sprintf("%s: a reboot asked for without a slot", n.p.Name)
		case n.h.undrained:
			w.broken = fmt.Sprintf("%s: a reboot asked for undrained", n.p.Name)
		}
		if !n.h.pending {
			n.h.pending = true
			w.logf("%s asks for its reboot", n.p.Name)
			w.at(w.now.Add(w.within(2, 5)), dEvent{node: i, kind: dDown})
		}
		return // the machine goes down; the next boot's daemon goes on
	case cycle.RecordBack:
		if ok {
			n.p.Claim.Phase = claim.PhaseRebooted
		}
	case cycle.Resume:
		if n.p.Claim.State == claim.Holding {
			w.release(i)
		}
		return
	}
	w.cycleSoon(i, w.now)
}

// release frees node i's slot and uncordons it in one write, and checks
// that a reboot came between its taking and its release.
func (w *dWorld) release(i int) {
	n := w.nodes[i]
	if n.p.Claim.BootID == bootName(n.h.boot) && n.p.Claim.Phase != claim.PhaseAborted {
		w.broken = fmt.Sprintf("%s: released as done in the boot the slot was taken in", n.p.Name)
	}
	n.done, n.mode = true, dIdle
	n.p.Claim = claim.Claim{}
	n.p.Labels = map[string]string{zone: n.p.Labels[zone]}
	n.h.mark, n.h.unsched, n.h.undrained = false, false, true
	w.last = w.now
	w.logf("%s releases", n.p.Name)
	w.changed(i)
}

// forget: node i's daemon is gone, with what it remembered.
func (w *dWorld) forget(i int) {
	h := &w.nodes[i].h
	h.up, h.took, h.drained = false, nil, false
	h.gen++
}

// down: node i's machine goes down; it boots again after a while, the
// update applied, and its kubelet reports Ready a little later.
func (w *dWorld) down(i int) {
	n := w.nodes[i]
	w.forget(i)
	n.h.pending, n.h.needed, n.h.off, n.h.waitReady = false, false, true, false
	n.p.Ready = false
	w.changed(i)
	w.at(w.now.Add(w.within(25, 45)), dEvent{node: i, kind: dBooted})
}

// hostEvent runs an event of node i's machine or daemon.
func (w *dWorld) hostEvent(e dEvent) {
	i, n := e.node, w.nodes[e.node]
	switch e.kind {
	case dCycle:
		if e.gen == n.h.gen && n.h.up {
			w.decide(i)
		}
	case dStepDone:
		if e.gen == n.h.gen && n.h.up {
			w.stepDone(i, e.step)
		}
	case dDown:
		w.logf("%s goes down", n.p.Name)
		w.down(i)
	case dBooted:
		n.h.boot++
		n.h.up, n.h.off, n.h.upSince = true, false, w.now
		w.logf("%s boots (%s)", n.p.Name, bootName(n.h.boot))
		w.cycleSoon(i, w.reply())
		w.at(w.now.Add(w.within(3, 12)), dEvent{node: i, kind: dReadyAgain})
	case dReadyAgain:
		n.p.Ready = true
		w.changed(i)
		if n.h.waitReady && n.h.up {
			n.h.waitReady = false
			w.cycleSoon(i, w.reply())
		}
	case dStarted:
		if e.gen != n.h.gen || n.h.off {
			return // the machine went down since: its boot starts the daemon
		}
		n.h.up = true
		w.logf("%s: the daemon starts again", n.p.Name)
		w.resume(i, true)
	case dReread:
		if e.gen == n.h.gen && n.h.up {
			w.resume(i, false)
		}
	case dCrash:
		if e.gen != n.h.gen || !n.h.up || n.done || n.mode == dIdle {
			return // holding by now: the cycle draws its own crash
		}
		n.h.crashes++
		w.logf("%s: the daemon crashes %s", n.p.Name, [...]string{dFollow: "following", dFront: "in the front", dEntering: "entering", dWriting: "writing"}[n.mode])
		w.forget(i)
		// Its looks, verifies and requests in flight die with it.
		n.mode, n.view, n.looking = dDead, nil, false
		w.at(w.now.Add(w.within(3, 30)), dEvent{node: i, kind: dStarted, gen: n.h.gen})
	}
}

// crashWhileWaiting: with the faults, a quarter of the nodes' daemons
// crash at a time drawn in the first minutes of their wait.
func (w *dWorld) crashWhileWaiting(i int) {
	if w.cfg.faults && w.rnd.IntN(4) == 0 {
		w.at(w.now.Add(time.Duration(w.rnd.Int64N(int64(5*time.Minute)))), dEvent{node: i, kind: dCrash, gen: w.nodes[i].h.gen})
	}
}

// crashWhileEntering: with the faults, an eighth of the daemons that
// announce crash before their verify has decided, or as their commit or
// step back is on its way.
func (w *dWorld) crashWhileEntering(i int) {
	if w.cfg.faults && w.rnd.IntN(8) == 0 {
		w.at(w.now.Add(time.Duration(w.rnd.Int64N(int64(40*time.Millisecond)))), dEvent{node: i, kind: dCrash, gen: w.nodes[i].h.gen})
	}
}

// replied: the write of e landed, and the daemon that sent it is there
// to get its reply. With the faults, one reply in ten is lost: the
// daemon's request times out and it reads its claim (dReread).
func (w *dWorld) replied(e dEvent) bool {
	n := w.nodes[e.node]
	if e.gen != n.h.gen || !n.h.up {
		return false // its daemon is gone; the one started again reads
	}
	if w.cfg.faults && w.rnd.IntN(10) == 0 {
		w.logf("%s: the reply is lost", n.p.Name)
		n.mode = dWriting
		w.at(w.now.Add(w.within(3, 30)), dEvent{node: e.node, kind: dReread, gen: n.h.gen})
		return false
	}
	return true
}

// resume: node i's daemon goes on from its claim as read, as
// lock.Acquire and the cycle do: a waiting node follows, or looks at the
// front where its label says it is in it; an entering one verifies; a
// holder decides its next step. fresh: a daemon started again, which
// remembers nothing (a new Front, a new Entrant); else the same daemon
// after a lost reply.
func (w *dWorld) resume(i int, fresh bool) {
	n := w.nodes[i]
	n.h.upSince = w.now
	if fresh {
		n.front = &Front{Node: n.p.Name, Grace: n.front.Grace, Jitter: n.front.Jitter}
		n.enter = nil
		if w.paused() {
			n.front.SetPaused(true, w.now) // its blockers, looked at first
		}
	}
	n.looking, n.removed = false, false // it has read its claim
	switch n.p.Claim.State {
	case "":
		if n.joined && !n.done && !n.silent && !n.held {
			w.rejoin(i) // an admin removed its waiting claim
		}
	case claim.Waiting:
		if n.enter != nil {
			n.enter.Waiting()
		}
		if RoleOf(n.p.Labels) == RoleBehind {
			w.follow(i, time.Time{})
			return
		}
		n.mode = dFront
		w.watchFront(i)
		w.lookSoon(i)
	case claim.Entering:
		if n.enter == nil {
			n.enter = NewEntrant(n.p.Name)
		}
		n.mode = dEntering
		w.watchFront(i) // a step back looks at the front from it
		w.verifySoon(i, w.reply())
	case claim.Holding:
		n.mode, n.view = dIdle, nil
		if fresh {
			w.cycleSoon(i, w.reply())
		} else {
			w.startCycle(i)
		}
	}
}

// TestDriveCycleFaults: rolls of 60 nodes where a quarter of the daemons
// crash while they wait (following or in the front), an eighth of those
// that announce crash before their commit lands, a quarter of
// the holders' daemons crash at one of their first steps, and an eighth of
// the machines reboot unplanned before their reboot is asked for, and one
// reply in ten to an announce, a commit or a step back is lost, every
// watch ends a few times (drive_watch_test.go), an admin removes a few
// waiting claims (drive_admin_test.go), the operator pauses the roll once
// (drive_pause_test.go) and holds a few waiting nodes
// (drive_hold_test.go), and one roll in three has an outage of the API
// server; each
// daemon is started again, or reads its claim after the lost reply. No
// slot stays idle longer than takeBound for a node whose daemon runs. Every node reboots and releases, within the
// limits, each release after a reboot, each reboot drained.
func TestDriveCycleFaults(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: time.Second, faults: true, progress: true}
	faults := map[string]int{}
	var longest time.Duration
	for seed := range uint64(20) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		for _, f := range []string{"crashes following", "crashes in the front", "crashes entering", "crashes writing", "crashes\n", "reboots unplanned", "reply is lost", "every watch ends", "the admin removes", "the operator pauses", "is held and leaves"} {
			faults[strings.TrimSpace(f)] += strings.Count(w.trace.String(), f)
		}
		if w.outTo.After(w.outFrom) {
			faults["API outages"]++
		}
		longest = max(longest, w.last.Sub(t0))
	}
	t.Logf("20 seeds, done at %v at the latest; faults: %v (\"crashes\": a holder's daemon)", longest.Round(time.Second), faults)
	for _, f := range []string{"crashes following", "crashes in the front", "crashes entering", "crashes writing", "crashes", "reboots unplanned", "reply is lost", "every watch ends", "the admin removes", "the operator pauses", "is held and leaves", "API outages"} {
		if faults[f] == 0 {
			t.Errorf("no daemon %s", f)
		}
	}
}

// TestDriveFindsBrokenCycle: each rule of cycle.Next broken by hand is
// found by the world's checks; the one that trusts a recorded drain after
// a restart only with the faults on.
func TestDriveFindsBrokenCycle(t *testing.T) {
	skipUnderRace(t)
	tests := []struct {
		name   string
		faults bool
		next   func(cycle.Facts) cycle.Step
		want   string
	}{
		{"released without a reboot", false, func(f cycle.Facts) cycle.Step {
			if s := cycle.Next(f); s != cycle.RequestReboot {
				return s
			}
			return cycle.Resume
		}, "released as done in the boot the slot was taken in"},
		{"the reboot asked for without the drain", false, func(f cycle.Facts) cycle.Step {
			if s := cycle.Next(f); s != cycle.Drain {
				return s
			}
			return cycle.RequestReboot
		}, "a reboot asked for undrained"},
		{"a drain begun taken as done after a restart", true, func(f cycle.Facts) cycle.Step {
			if f.State == claim.Holding && f.Claim.Phase == claim.PhaseDraining && f.Took == nil {
				return cycle.RequestReboot
			}
			return cycle.Next(f)
		}, "a reboot asked for undrained"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: time.Second, faults: tt.faults, next: tt.next}
			for seed := range uint64(20) {
				if w := drive(cfg, seed); strings.Contains(w.broken, tt.want) {
					t.Logf("seed %d: %s", seed, w.broken)
					return
				}
			}
			t.Fatalf("no seed of 20 found %q", tt.want)
		})
	}
}

// TestDriveMixed: rolls of 60 nodes that publish limits of their own
// (concurrency 1 to 3, one or two a zone), every seventh daemon hung
// after its join, the others crashing and rebooting as in
// TestDriveCycleFaults. Each commit keeps the strictest limits of the
// claims there before its announce, in its zone (audit.CheckCommits), and
// every live node reboots. Without the front's watch of the waiting
// claims that publish other limits, a hung node of a stricter class,
// read by every verify for its limits and given way to as the first in
// the queue, is never passed over (the front's grace runs only for what
// its watches show), and every other class waits for good.
func TestDriveMixed(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 3, zoneMax: 2, hold: 30 * time.Second, lag: time.Second, faults: true, mixed: true, silentEvery: 7}
	var longest time.Duration
	for seed := range uint64(10) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		longest = max(longest, w.last.Sub(t0))
	}
	t.Logf("10 seeds: done at %v at the latest", longest.Round(time.Second))
	cfg.deadline = 2 * time.Hour
	cfg.noOtherLimitsWatch = true
	for seed := range uint64(10) {
		if w := drive(cfg, seed); strings.Contains(w.broken, "never rebooted") {
			t.Logf("without the watch of other limits: seed %d: %s", seed, w.broken[:strings.Index(w.broken, " (")])
			return
		}
	}
	t.Error("without the watch of other limits: no seed of 10 stalls")
}
