package queue

import (
	"strings"
	"testing"
	"time"
)

// Watches that end. The API server ends every watch now and then (a
// restart, an outage, a compaction and its 410), and client-go's
// informers list and watch again only after their back-off, up to half a
// minute, reporting nothing meanwhile. The lock's shell (lock/watch.go)
// wakes the node in the front a second after its streams ended with none
// open again; the node sees its watch stale and reads the front directly
// at each look (View.Stale), every 2 to 4 s, until the informers have
// listed again. A follower opens its watch of the node ahead again at
// once, its first event that node as it is.

// drawWatchEnds: every watch ends two to five times in the roll's first
// hour, and as the outage begins.
func (w *dWorld) drawWatchEnds() {
	if !w.cfg.faults && !w.cfg.watchEnds {
		return
	}
	w.drawTimes(dWatchEnd, 2, 5, time.Hour)
	if w.outTo.After(w.outFrom) {
		w.at(w.outFrom, dEvent{kind: dWatchEnd})
	}
}

// serverDown reports whether the API server is away now.
func (w *dWorld) serverDown() bool { return !w.now.Before(w.outFrom) && w.now.Before(w.outTo) }

// watchesEnd: every watch ends now. What the ended streams carried is
// lost; the informers of each front node list again after a back-off
// drawn up to half a minute, from when the server answers again.
func (w *dWorld) watchesEnd() {
	w.logf("every watch ends")
	for i, n := range w.nodes {
		switch {
		case n.view != nil:
			n.viewGen++
			n.stale = true
			back := latest(w.now, w.outTo).Add(800*time.Millisecond + time.Duration(w.rnd.Int64N(int64(30*time.Second))))
			w.at(back, dEvent{node: i, kind: dRelisted, gen: n.viewGen})
			if n.mode == dFront && !n.looking && !w.cfg.noWakeOnWatchEnd {
				n.looking = true
				w.at(w.now.Add(time.Second), dEvent{node: i, kind: dLook, gen: -1})
			}
		case n.mode == dFollow && n.a.Kind == WatchPred && n.watched != "":
			w.at(w.reply(), dEvent{node: i, kind: dFollowEv, gen: n.gen, ev: w.changeOf(w.index(n.watched))})
		}
	}
}

// relisted: node i's informers have listed again: its view is the world
// as it is now, and it looks, or verifies, at once.
func (w *dWorld) relisted(e dEvent) {
	n := w.nodes[e.node]
	if n.view == nil || e.gen != n.viewGen || !n.stale {
		return // a watch since closed, or opened again
	}
	n.stale, n.viewAt = false, w.now
	clear(n.view)
	for _, m := range w.nodes {
		if m.p.Claim.State != "" {
			n.view[m.p.Name] = w.copyOf(m.p)
		}
	}
	switch n.mode {
	case dFront:
		w.lookSoon(e.node)
	case dEntering:
		w.verifySoon(e.node, w.reply())
	}
}

// TestDriveWatchEnds: with every watch ending now and then, and no
// other fault, each slot a node may take is taken within takeBound; with
// the front nodes not woken when their watches end, a node that looked
// just before sleeps until its next timed look (16 to 32 s) while its
// informers back off, and the progress check finds it, as TestSim seed
// 190 did on the real daemons.
func TestDriveWatchEnds(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: time.Second, watchEnds: true, progress: true}
	ends := 0
	for seed := range uint64(10) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		ends += strings.Count(w.trace.String(), "every watch ends")
	}
	t.Logf("10 seeds, %d times every watch ended, no slot idle past %v", ends, takeBound)
	cfg.noWakeOnWatchEnd = true
	if !findsIdleSlot(t, cfg, "not woken") {
		t.Fatal("with the front nodes not woken, no seed of 10 found an idle slot")
	}
}
