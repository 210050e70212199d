package queue

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
)

// The explorer: every interleaving of small clusters' nodes going through
// the slot protocol, with crashes and lost replies anywhere, deciding with
// the real Entrant at each verify. It checks the safety invariant in every
// state reached, and that from every state reached each node can still
// get its reboot. It complements model/claims.pml, which checks the
// protocol's own model: here the decisions are the code's.
//
// What it abstracts: the API server is linearizable; a node's writes are
// conditional on the version it last read or wrote, so one fails (and the
// node reads again) after its own earlier write's reply was lost or after
// an admin removed its claim (once per exploration, in any state); a
// verify is one consistent snapshot of every claim; time only orders the
// joins (since) and, for the Entrant, says whether a node has stayed
// long enough to give way; no TTL. Each node needs one reboot: once
// released it is done.

// xStore is a node's claim as the API server has it.
type xStore int8

const (
	xNone xStore = iota
	xWaiting
	xEntering
	xHolding
	xDone // released after its reboot
)

// xLocal is what a node's daemon knows and is about to do.
type xLocal int8

const (
	lIdle     xLocal = iota // no claim: join
	lWaiting                // announce
	lEntering               // verify
	lCommit                 // the verify said commit: write holding
	lStay                   // the verify said stay: verify again, or give way
	lStepBack               // write waiting
	lHolding                // reboot, then release
	lUnknown                // after a crash or a lost reply: read the claim again
	lDone
)

type xNode struct {
	store xStore
	since int8 // join order; -1 before the join
	local xLocal
	// stale: the Node changed since its daemon last read or wrote it
	// (its reply lost, an admin's removal): its next write fails.
	stale bool
}

// xState is the whole cluster; comparable, so it keys the visited set.
type xState struct {
	nodes  [3]xNode
	joined int8
	edited bool // the admin has removed a claim
}

// xConfig is one node's configuration and zone.
type xConfig struct {
	name   string
	zone   string
	limits claim.Limits
}

// xRules are the decisions under test: the real ones, or a broken variant.
type xRules struct {
	// tamper, if set, changes what a verify read before the Entrant
	// decides from it (a broken variant).
	tamper func(name string, v *Verified)
	// skipVerify: announce and commit without verifying (a broken variant).
	skipVerify bool
	// unconditional: writes that are not conditional on the version last
	// read (a broken variant).
	unconditional bool
}

var xT0 = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)

type explorer struct {
	cfg   [3]xConfig
	rules xRules
}

func (x *explorer) participants(s xState) []claim.Participant {
	var ps []claim.Participant
	for i, n := range s.nodes {
		var st claim.State
		switch n.store {
		case xWaiting:
			st = claim.Waiting
		case xEntering:
			st = claim.Entering
		case xHolding:
			st = claim.Holding
		default:
			continue
		}
		c := x.cfg[i]
		groups := map[string]string{}
		for _, g := range c.limits.Groups {
			groups[g.Label] = c.zone
		}
		ps = append(ps, claim.Participant{
			Name: c.name, Labels: map[string]string{config.ZoneLabel: c.zone}, Ready: true,
			Claim: claim.Claim{State: st, Since: xT0.Add(time.Duration(n.since) * time.Second), Limits: c.limits, Groups: groups},
		})
	}
	return ps
}

// move is one transition: what it does, and the state after.
type move struct {
	what string
	to   xState
}

// moves are every transition from s: each node's next step, a crash of
// each running daemon, and a lost reply for each write.
func (x *explorer) moves(s xState) []move {
	var out []move
	for i := range s.nodes {
		n := s.nodes[i]
		name := x.cfg[i].name
		// write: the store becomes to; the reply arrives (local next) or
		// is lost (the daemon reads again).
		write := func(what string, to xStore, next xLocal, since int8, joined int8) {
			if n.stale && !x.rules.unconditional {
				t := s
				t.nodes[i].local = lUnknown
				out = append(out, move{name + " " + what + ": refused, the Node changed", t})
				return
			}
			for _, lost := range []bool{false, true} {
				t := s
				t.nodes[i].store, t.nodes[i].since, t.joined = to, since, joined
				t.nodes[i].local, t.nodes[i].stale = next, lost
				w := what
				if lost {
					t.nodes[i].local, w = lUnknown, what+" (reply lost)"
				}
				out = append(out, move{name + " " + w, t})
			}
		}
		switch n.local {
		case lIdle:
			if n.store == xNone {
				write("joins", xWaiting, lWaiting, s.joined, s.joined+1)
			}
		case lWaiting:
			if x.rules.skipVerify {
				write("takes a slot unverified", xHolding, lHolding, n.since, s.joined)
				break
			}
			write("announces", xEntering, lEntering, n.since, s.joined)
		case lEntering:
			out = append(out, x.verify(s, i)...)
		case lCommit:
			write("commits", xHolding, lHolding, n.since, s.joined)
		case lStepBack:
			write("steps back", xWaiting, lWaiting, n.since, s.joined)
		case lStay:
			// The Entrant: verify again soon; after GiveWayAfter of
			// staying, step back (the claims it waits for seem dead).
			t := s
			t.nodes[i].local = lEntering
			out = append(out, move{name + " verifies again", t})
			if a := x.afterStaying(i); a == EnterStepBack {
				t := s
				t.nodes[i].local = lStepBack
				out = append(out, move{name + " gives way after staying", t})
			}
		case lHolding:
			write("reboots and releases", xDone, lDone, n.since, s.joined)
		case lUnknown:
			t := s
			t.nodes[i].local = map[xStore]xLocal{
				xNone: lIdle, xWaiting: lWaiting, xEntering: lEntering, xHolding: lHolding, xDone: lDone,
			}[n.store]
			t.nodes[i].stale = false
			out = append(out, move{name + " reads its claim again", t})
		}
		if !s.edited && (n.store == xWaiting || n.store == xEntering || n.store == xHolding) {
			t := s
			t.nodes[i].store, t.nodes[i].since, t.nodes[i].stale, t.edited = xNone, -1, true, true
			out = append(out, move{"the admin removes " + name + "'s claim", t})
		}
		if n.local != lDone && n.local != lUnknown {
			t := s
			t.nodes[i].local = lUnknown
			out = append(out, move{name + " crashes", t})
		}
	}
	return out
}

// verify is node i's consistent read and the real Entrant's decision.
func (x *explorer) verify(s xState, i int) []move {
	ps := x.participants(s)
	name := x.cfg[i].name
	v := Verified{Now: xT0, Server: xT0, Own: x.cfg[i].limits, Snap: ps, Whole: true,
		Announced: s.nodes[i].store == xEntering && slices.ContainsFunc(ps, func(p claim.Participant) bool { return p.Name == name })}
	if x.rules.tamper != nil {
		x.rules.tamper(name, &v)
	}
	a := NewEntrant(name).Verified(v)
	t := s
	switch a.Move {
	case EnterCommit:
		t.nodes[i].local = lCommit
	case EnterStepBack:
		t.nodes[i].local = lStepBack
	case EnterStay:
		t.nodes[i].local = lStay
	default:
		// Not the entering claim it announced: it reads its own again.
		t.nodes[i].local, t.nodes[i].stale = lUnknown, false
	}
	return []move{{fmt.Sprintf("%s verifies: %s %s", name, a.Move, a.Reason), t}}
}

// afterStaying is what the Entrant of node i does with a stay that has
// lasted past GiveWayAfter.
func (x *explorer) afterStaying(i int) EnterMove {
	stay := Verified{Now: xT0, Server: xT0, Announced: true, Whole: true, Own: claim.Limits{Concurrency: 1},
		Snap: []claim.Participant{
			{Name: "ahead", Ready: true, Claim: claim.Claim{State: claim.Entering, Since: xT0, Limits: claim.Limits{Concurrency: 1}}},
			{Name: x.cfg[i].name, Ready: true, Claim: claim.Claim{State: claim.Entering, Since: xT0.Add(-time.Second), Limits: claim.Limits{Concurrency: 1}}},
		}}
	e := NewEntrant(x.cfg[i].name)
	if a := e.Verified(stay); a.Move != EnterStay {
		panic(fmt.Sprintf("the stay's read decides %s", a.Move))
	}
	stay.Now = xT0.Add(GiveWayAfter + time.Second)
	return e.Verified(stay).Move
}

// violation says which holder's limits s breaks, or "".
func (x *explorer) violation(s xState) string {
	var holders []int
	for i, n := range s.nodes {
		if n.store == xHolding {
			holders = append(holders, i)
		}
	}
	for _, h := range holders {
		lim := x.cfg[h].limits
		if len(holders) > lim.Concurrency {
			return fmt.Sprintf("%d nodes hold slots; %s allows %d", len(holders), x.cfg[h].name, lim.Concurrency)
		}
		for _, g := range lim.Groups {
			in := 0
			for _, o := range holders {
				if x.cfg[o].zone == x.cfg[h].zone {
					in++
				}
			}
			if in > g.Max {
				return fmt.Sprintf("%d nodes of %s hold slots; %s allows %d", in, x.cfg[h].zone, x.cfg[h].name, g.Max)
			}
		}
	}
	return ""
}

// result is what an exploration found.
type result struct {
	states    int
	violation []string // the path to the first unsafe state, if any
	stuck     int      // states from which some node can no longer finish
}

func (x *explorer) explore() result {
	start := xState{}
	for i := range start.nodes {
		start.nodes[i].since = -1
	}
	type visit struct {
		from xState
		what string
	}
	seen := map[xState]visit{start: {}}
	var order []xState
	queue := []xState{start}
	edges := map[xState][]xState{}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		order = append(order, s)
		if why := x.violation(s); why != "" {
			var path []string
			for c := s; c != start; c = seen[c].from {
				path = append(path, seen[c].what)
			}
			slices.Reverse(path)
			return result{states: len(seen), violation: append(path, "=> "+why)}
		}
		for _, m := range x.moves(s) {
			edges[s] = append(edges[s], m.to)
			if _, ok := seen[m.to]; !ok {
				seen[m.to] = visit{s, m.what}
				queue = append(queue, m.to)
			}
		}
	}
	// Backwards from the states where every node is done: whatever does
	// not reach one is stuck.
	rev := map[xState][]xState{}
	for from, tos := range edges {
		for _, to := range tos {
			rev[to] = append(rev[to], from)
		}
	}
	can := map[xState]bool{}
	var back []xState
	for _, s := range order {
		if s.nodes[0].local == lDone && s.nodes[1].local == lDone && s.nodes[2].local == lDone {
			can[s] = true
			back = append(back, s)
		}
	}
	for len(back) > 0 {
		s := back[len(back)-1]
		back = back[:len(back)-1]
		for _, p := range rev[s] {
			if !can[p] {
				can[p] = true
				back = append(back, p)
			}
		}
	}
	return result{states: len(seen), stuck: len(seen) - len(can)}
}

func zoneRule(max int) []claim.GroupLimit {
	return []claim.GroupLimit{{Label: config.ZoneLabel, Max: max}}
}

// clusters are the small clusters explored: k = 1 and 2, two zones, and
// mixed configurations.
var clusters = []struct {
	name string
	cfg  [3]xConfig
}{
	{"k=1", [3]xConfig{{"n0", "a", claim.Limits{Concurrency: 1}}, {"n1", "a", claim.Limits{Concurrency: 1}}, {"n2", "b", claim.Limits{Concurrency: 1}}}},
	{"k=2, one per zone", [3]xConfig{
		{"n0", "a", claim.Limits{Concurrency: 2, Groups: zoneRule(1)}},
		{"n1", "a", claim.Limits{Concurrency: 2, Groups: zoneRule(1)}},
		{"n2", "b", claim.Limits{Concurrency: 2, Groups: zoneRule(1)}},
	}},
	{"k=2 and a node with k=1", [3]xConfig{
		{"n0", "a", claim.Limits{Concurrency: 2}},
		{"n1", "b", claim.Limits{Concurrency: 2}},
		{"n2", "b", claim.Limits{Concurrency: 1}},
	}},
	{"k=3 with one per zone, and k=2 with none", [3]xConfig{
		{"n0", "a", claim.Limits{Concurrency: 3, Groups: zoneRule(1)}},
		{"n1", "a", claim.Limits{Concurrency: 2}},
		{"n2", "b", claim.Limits{Concurrency: 3, Groups: zoneRule(1)}},
	}},
}

// TestExploreEntrant: in every small cluster, every state reached by any
// interleaving, crashes and lost replies is safe, and each node can still
// get its reboot from it.
func TestExploreEntrant(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			x := &explorer{cfg: c.cfg}
			r := x.explore()
			t.Logf("%s: %d states", c.name, r.states)
			if r.violation != nil {
				t.Fatalf("unsafe:\n  %s", strings.Join(r.violation, "\n  "))
			}
			if r.stuck > 0 {
				t.Errorf("%d of %d states cannot finish every node's reboot", r.stuck, r.states)
			}
		})
	}
}

// TestExploreEntrantFindsBrokenRules: each rule broken by hand is found,
// with the path to the unsafe state.
func TestExploreEntrantFindsBrokenRules(t *testing.T) {
	broken := []struct {
		name    string
		cluster int
		rules   xRules
	}{
		{"no verify: a slot taken at the announce", 0, xRules{skipVerify: true}},
		{"the entering claims not counted", 0, xRules{tamper: func(name string, v *Verified) {
			v.Snap = slices.DeleteFunc(v.Snap, func(p claim.Participant) bool { return p.Claim.State == claim.Entering && p.Name != name })
		}}},
		{"the zone rules ignored", 1, xRules{tamper: func(_ string, v *Verified) {
			v.Own.Groups = nil
			for i := range v.Snap {
				v.Snap[i].Claim.Limits.Groups = nil
			}
		}}},
		{"only its own limits, not those the others publish", 2, xRules{tamper: func(_ string, v *Verified) {
			for i := range v.Snap {
				v.Snap[i].Claim.Limits = v.Own
			}
		}}},
		{"writes not conditional on the version read", 0, xRules{unconditional: true}},
	}
	for _, b := range broken {
		t.Run(b.name, func(t *testing.T) {
			x := &explorer{cfg: clusters[b.cluster].cfg, rules: b.rules}
			r := x.explore()
			if r.violation == nil {
				t.Fatalf("not found in %d states", r.states)
			}
			t.Logf("found after %d states:\n  %s", r.states, strings.Join(r.violation, "\n  "))
		})
	}
}
