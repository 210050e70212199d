package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// takeBound is how soon a waiting node whose daemon runs takes a slot it
// may take, as the simulator of the real daemons checks it
// (test/sim.TakeBound, docs/claims.md "No idle slot"): at most this long
// after the slot became free to it, after its daemon started again or
// read its claim after a lost reply, or after an outage of the API
// server, whichever is later.
const takeBound = 10 * time.Second

// progress is the drive's check of that bound, every second: the queue
// as every node computes it from the true state (claim.Eligibility), the
// nodes whose daemon is gone passed over after the grace, as the others
// pass them over. A node behind a hung one waits for its resync by design
// (TestDriveHungHead), so the check is on only for rolls without hung
// daemons (dConfig.progress).
type progress struct {
	since  map[string]time.Time // node -> eligible since
	placed map[string]time.Time // node -> the claim's place it was eligible with
	idle   time.Duration        // the longest a node stayed eligible, its daemon running
}

func (w *dWorld) tick() {
	if w.pr.since == nil {
		w.pr = progress{since: map[string]time.Time{}, placed: map[string]time.Time{}}
	}
	var ps []claim.Participant
	live := map[string]bool{}
	busy := false
	for _, n := range w.nodes {
		if !n.done && !n.silent {
			busy = true
		}
		if n.p.Claim.State != "" {
			ps = append(ps, w.copyOf(n.p))
		}
		live[n.p.Name] = n.h.up && n.mode != dDead && n.mode != dWriting
	}
	if !busy {
		return // the roll is over: no more ticks
	}
	w.at(w.now.Add(time.Second), dEvent{kind: dTick})
	const grace = time.Minute // the Fronts' (newWorld)
	q := claim.Eligibility(ps, w.now, 0, func(name string) bool {
		s, ok := w.pr.since[name]
		return !live[name] && ok && w.now.Sub(s) > grace
	})
	for _, name := range q.Waiting {
		n := w.nodes[w.index(name)]
		if !q.Eligible(name) {
			delete(w.pr.since, name)
			continue
		}
		if _, ok := w.pr.since[name]; !ok || !w.pr.placed[name].Equal(n.p.Claim.Since) {
			w.pr.since[name], w.pr.placed[name] = w.now, n.p.Claim.Since
		}
		if !live[name] {
			continue
		}
		wait := w.now.Sub(latest(w.pr.since[name], n.h.upSince, w.outTo, w.pauseTo))
		w.pr.idle = max(w.pr.idle, wait)
		if wait > takeBound {
			w.broken = fmt.Sprintf("%s may take a free slot and has not, %v later (its daemon runs)", name, wait.Round(time.Second))
		}
	}
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// TestDriveFindsIdleSlot: with the front's watches lagging up to 30 s,
// a node learns of a freed slot too late, and the progress check says
// so.
func TestDriveFindsIdleSlot(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: 30 * time.Second, progress: true}
	if !findsIdleSlot(t, cfg, "watches lagging 30 s") {
		t.Fatal("no seed of 10 found it")
	}
}

// findsIdleSlot runs the first ten seeds of cfg, a broken variant, until
// the progress check finds a slot left idle, and logs it as what found it.
func findsIdleSlot(t *testing.T, cfg dConfig, what string) bool {
	t.Helper()
	for seed := range uint64(10) {
		if w := drive(cfg, seed); strings.Contains(w.broken, "may take a free slot") {
			t.Logf("%s: seed %d: %s", what, seed, w.broken)
			return true
		}
	}
	return false
}
