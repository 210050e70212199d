package queue

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The operator's pause (kured-host pause). A node the Front admits asks
// its blockers before it announces (lock's MayAnnounce, the pause read
// afresh): paused, it does not write, keeps its place and looks again
// when the pause is lifted, which the watch of the orders tells it within
// a second. An entering node asks them again right before its commit
// (Take.Check, Entrant.Checked): paused, it steps back, keeping its place
// (the claim's since), and looks again when the pause is lifted. Every
// waiting daemon looks at its blockers when the orders change and tells
// its Front of the pause and of its end (no waiting node is silent while
// paused; after it, silence counts from its end). The drive pauses at an
// announce, so that a verify meets the pause.

var errPaused = errors.New("reboots are paused for the cluster")

// drawPause: with the faults, or pauses, the operator pauses the roll
// once, for 30 s to 5 minutes, at the first announce after a time drawn
// in its first 20 minutes.
func (w *dWorld) drawPause() {
	if !w.cfg.faults && !w.cfg.pauses {
		return
	}
	w.pauseAfter = t0.Add(time.Duration(w.rnd.Int64N(int64(20 * time.Minute))))
	w.pauseFor = 30*time.Second + time.Duration(w.rnd.Int64N(int64(270*time.Second)))
}

// pauseAt begins the pause now, if an announce is the one it waits for.
func (w *dWorld) pauseAt() {
	if w.pauseFor == 0 || !w.pauseFrom.IsZero() || w.now.Before(w.pauseAfter) {
		return
	}
	w.pauseFrom, w.pauseTo = w.now, w.now.Add(w.pauseFor)
	w.logf("the operator pauses the roll for %v", w.pauseFor)
	w.tellPaused(true)
	w.at(w.pauseTo, dEvent{kind: dPauseEnds})
}

// tellPaused: every running daemon's blockers say paused, or no longer:
// the watch of the orders wakes each to look at them (daemon's
// notePaused), and each tells its Front.
func (w *dWorld) tellPaused(paused bool) {
	if !paused {
		w.logf("the operator lifts the pause")
	}
	for _, n := range w.nodes {
		if n.h.up && n.mode != dDead {
			n.front.SetPaused(paused, w.now)
		}
	}
}

func (w *dWorld) paused() bool { return !w.now.Before(w.pauseFrom) && w.now.Before(w.pauseTo) }

// waitLifted: node i, in the front, refused by the pause, looks again
// once the pause is lifted.
func (w *dWorld) waitLifted(i int) {
	n := w.nodes[i]
	w.logf("%s keeps its place while the roll is paused", n.p.Name)
	n.lookGen++
	w.at(latest(w.now, w.pauseTo).Add(time.Duration(w.rnd.Int64N(int64(time.Second)))), dEvent{node: i, kind: dLook, gen: n.lookGen})
}

// TestDrivePause: with the roll paused once mid-roll, and no other
// fault, no node commits while it is paused, and after it each node
// takes its slot in its class's order (the world's fairness check), with
// no slot idle past takeBound once it is lifted. With the Front's pause
// ignored (Silent counting a node that waited out the pause as silent),
// nodes behind pass it over after the pause, at 4 seeds of 10.
func TestDrivePause(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: time.Second, pauses: true, progress: true}
	kept, refused := 0, 0
	for seed := range uint64(10) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		if w.unfair > 0 {
			t.Errorf("seed %d: %d slots taken out of the class's order", seed, w.unfair)
		}
		kept += strings.Count(w.trace.String(), "keeps its place while the roll is paused")
		refused += strings.Count(w.trace.String(), "is refused at its commit")
	}
	t.Logf("10 seeds: nodes kept their place %d times, %d refused at their commit", kept, refused)
	if kept == 0 || refused == 0 {
		t.Errorf("the pause kept %d nodes and refused %d commits: the scenario did not happen", kept, refused)
	}
}
