package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// The operator's hold (kured-host hold NODE): a label on the node's own
// Node. Its daemon, woken by its watch of its Node, looks at its blockers
// and leaves the queue: it stops acquiring and removes its waiting or
// entering claim (daemon's leaveQueue), and joins again, at the back,
// once the hold is lifted. The nodes that followed it, or saw it in the
// front, see it leave. A node whose commit is already on its way is not
// held here: the commit's own check of the hold (Take.Check) is the
// lock's, and a slot taken as the daemon decided to leave is given back
// by the cycle's abort, which the drive does not draw.

// drawHolds: with the faults, or holds, the operator holds a waiting
// node one to three times in the roll's first 10 minutes, each for 30 s
// to 5 minutes.
func (w *dWorld) drawHolds() {
	if w.cfg.faults || w.cfg.holds {
		w.drawTimes(dHold, 1, 3, 10*time.Minute)
	}
}

// hold holds a node drawn among those that wait (following, in the
// front or entering) with their daemon running, if any.
func (w *dWorld) hold() {
	var cands []int
	for i, n := range w.nodes {
		waiting := n.p.Claim.State == claim.Waiting || n.p.Claim.State == claim.Entering
		if waiting && !n.held && !n.removed && n.h.up && (n.mode == dFollow || n.mode == dFront || n.mode == dEntering) {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return
	}
	i := cands[w.rnd.IntN(len(cands))]
	n := w.nodes[i]
	n.held = true
	d := 30*time.Second + time.Duration(w.rnd.Int64N(int64(270*time.Second)))
	w.at(w.now.Add(d), dEvent{node: i, kind: dHoldLifted})
	w.logf("%s is held and leaves the queue (%s) for %v", n.p.Name, n.p.Claim.State, d)
	w.stopAcquiring(i)
	if w.cfg.stayWhenHeld {
		return
	}
	n.p.Claim.State = ""
	delete(n.p.Labels, FrontLabel)
	w.changed(i)
}

// liftHold: node i's hold is lifted; its daemon joins again.
func (w *dWorld) liftHold(i int) {
	n := w.nodes[i]
	n.held = false
	w.logf("%s's hold is lifted", n.p.Name)
	if w.cfg.stayWhenHeld {
		if n.p.Claim.State == claim.Waiting {
			w.resume(i, false)
		}
		return
	}
	if n.h.up && n.mode == dIdle && n.p.Claim.State == "" && !n.done {
		w.rejoin(i)
	}
}

// TestDriveHolds: with the operator holding waiting nodes now and then,
// and no other fault, each held node leaves the queue and joins again
// once its hold is lifted, and reboots; every other node too, within the
// limits, with no slot idle past takeBound for a node whose daemon runs.
// With a held node's daemon stopping but leaving its claim in the queue,
// the nodes behind it wait on it, and the progress check finds a slot
// left idle.
func TestDriveHolds(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: time.Second, holds: true, progress: true}
	held := map[string]int{}
	for seed := range uint64(10) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		for _, s := range []claim.State{claim.Waiting, claim.Entering} {
			held[string(s)] += strings.Count(w.trace.String(), "is held and leaves the queue ("+string(s)+")")
		}
	}
	t.Logf("10 seeds: held nodes that left the queue: %v", held)
	if held[string(claim.Waiting)] == 0 {
		t.Error("no waiting node was held")
	}
	cfg.stayWhenHeld = true
	if !findsIdleSlot(t, cfg, "held nodes left in the queue") {
		t.Error("with held nodes left in the queue, no seed of 10 found an idle slot")
	}
}
