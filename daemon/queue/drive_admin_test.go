package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// An admin removes a waiting claim (kubectl label node N
// kured-host.dev/claim-, and the annotation). The node's daemon does not
// see it at once: it follows on what it remembers until its resync reads
// its claim again (lock.recheckOwn), or until it writes (its front label,
// its announce), which the API server refuses, the claim's
// resourceVersion having moved on (lock.writeClaim); it reads its claim
// then, finds none, and joins again at the back of the queue
// (lock.Acquire's ErrNotJoined). A daemon started again reads its claim
// first. The nodes that followed it, or saw it in the front, see it leave.

// drawAdminRemovals: with the faults, an admin removes a following
// node's waiting claim two to five times in the roll's first 20 minutes.
func (w *dWorld) drawAdminRemovals() {
	if w.cfg.faults || w.cfg.adminRemovals {
		w.drawTimes(dAdminRemove, 2, 5, 20*time.Minute)
	}
}

// adminRemove removes the waiting claim of a following node whose daemon
// runs, if any: in half the draws the one that joined first, nearest the
// front, whose follower may be next to go; else one drawn.
func (w *dWorld) adminRemove() {
	var cands []int
	first := -1
	for i, n := range w.nodes {
		if n.mode == dFollow && n.p.Claim.State == claim.Waiting && !n.removed && n.h.up {
			cands = append(cands, i)
			if first < 0 || claim.QueueOrder(n.p, w.nodes[first].p) < 0 {
				first = i
			}
		}
	}
	if len(cands) == 0 {
		return
	}
	i := first
	if w.rnd.IntN(2) == 0 {
		i = cands[w.rnd.IntN(len(cands))]
	}
	n := w.nodes[i]
	n.mem, n.removed = w.copyOf(n.p), true
	n.p.Claim.State = ""
	delete(n.p.Labels, FrontLabel)
	w.logf("the admin removes %s's waiting claim", n.p.Name)
	w.changed(i)
}

// self is node i's claim as its daemon knows it.
func (w *dWorld) self(i int) claim.Participant {
	n := w.nodes[i]
	if n.removed {
		return w.copyOf(n.mem)
	}
	return w.copyOf(n.p)
}

// lost: node i's daemon has found its claim removed (how: at a resync, or
// a write refused); it joins again.
func (w *dWorld) lost(i int, how string) {
	n := w.nodes[i]
	n.removed = false
	w.logf("%s finds its claim removed %s and joins again", n.p.Name, how)
	if w.cfg.noRejoin {
		w.stopAcquiring(i)
		return
	}
	w.rejoin(i)
}

// rejoin: node i's daemon joins the queue again, at its back.
func (w *dWorld) rejoin(i int) {
	w.stopAcquiring(i)
	w.at(w.reply(), dEvent{node: i, kind: dJoin})
}

// stopAcquiring: node i's daemon stops waiting for a slot; what it asked
// meanwhile (the Follower's requests, its looks, its verify) is dropped
// when it comes back.
func (w *dWorld) stopAcquiring(i int) {
	n := w.nodes[i]
	n.mode, n.view, n.stale, n.looking = dIdle, nil, false, false
	n.gen++
	n.lookGen++
	n.verGen++
}

// TestDriveAdminRemovals: with an admin removing following nodes' waiting
// claims now and then, and no other fault, each of those nodes joins
// again and reboots, every other node too, within the limits and with no
// slot left idle past takeBound for a node whose daemon runs. With a
// daemon that does not join again, the drive's end finds its node never
// rebooted.
func TestDriveAdminRemovals(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 1, zoneMax: 1, hold: 90 * time.Second, lag: time.Second, adminRemovals: true, progress: true}
	removed, resynced, refused := 0, 0, 0
	for seed := range uint64(10) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		removed += strings.Count(w.trace.String(), "the admin removes")
		resynced += strings.Count(w.trace.String(), "removed at its resync")
		refused += strings.Count(w.trace.String(), "removed as its write is refused")
	}
	t.Logf("10 seeds: %d waiting claims removed; their daemons found it at a resync %d times, at a write %d times", removed, resynced, refused)
	if removed == 0 || resynced == 0 || refused == 0 {
		t.Errorf("%d removals, %d found at a resync, %d at a write: the scenario did not happen in each way", removed, resynced, refused)
	}
	cfg.noRejoin = true
	if w := drive(cfg, 0); !strings.Contains(w.broken, "never rebooted") {
		t.Errorf("with daemons that do not join again, seed 0 gave %q, not a node never rebooted", w.broken)
	}
}
