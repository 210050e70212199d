package claim

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// decodeSnapshot turns fuzz bytes into a small snapshot: up to 6 nodes in
// zones a, b or none, in any state (unreadable ones too), publishing
// concurrency 1-3 and maybe a zone rule, some with a recorded zone other
// than their label, some with times in the future (forged, or a wrong
// clock); plus the deciding node's own configuration.
func decodeSnapshot(data []byte) (snap []Participant, own Limits) {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	own = Limits{Concurrency: 1 + next()%3}
	if m := next() % 3; m > 0 {
		own.Groups = []GroupLimit{{zoneLabel, m}}
	}
	n := 1 + next()%6
	zones := []string{"", "a", "b"}
	for i := range n {
		state := []State{Waiting, Entering, Holding, Holding, "broken"}[next()%5]
		zoneMax := next() % 3
		p := node(fmt.Sprintf("n%d", i), state, zones[next()%3], next()%4, 1+next()%3, zoneMax)
		if state == "broken" {
			p.Claim = Claim{State: Holding, Phase: PhaseUnknown, Limits: Limits{Concurrency: 1}}
			p.Err = ErrUnparsable
		}
		if r := next() % 4; r == 0 && p.Claim.State.Active() {
			p.Claim.Groups = map[string]string{zoneLabel: zones[1+next()%2]}
		}
		p.Ready = next()%5 != 0
		switch next() % 6 {
		case 1:
			p.Claim.Updated = t0.Add(time.Hour)
		case 2:
			future := t0.Add(time.Hour)
			p.Claim.Acquired = &future
		case 3:
			p.Claim.Since = t0.Add(time.Hour)
		}
		snap = append(snap, p)
	}
	return snap, own
}

// unsafe returns the first active claim that is in a domain with more
// active claims than the limit it published for that domain, or "".
func unsafe(snap []Participant, now time.Time, ttl time.Duration) string {
	var act []Participant
	for _, p := range snap {
		if p.active(now, ttl) {
			act = append(act, p)
		}
	}
	for _, p := range act {
		for _, d := range domainsOf(p, ruleLabels(nil, p.Claim.Limits)) {
			lim, ok := d.limit([]Limits{p.Claim.Limits})
			if !ok {
				continue
			}
			n := 0
			for _, q := range act {
				if d.contains(&q) {
					n++
				}
			}
			if n > lim {
				return fmt.Sprintf("%s: %d active in %s, it published %d", p.Name, n, d, lim)
			}
		}
	}
	return ""
}

// FuzzRules: from any safe snapshot, a node that Verify lets commit keeps
// the snapshot safe (with its claim publishing the stricter of its
// configuration and what it published), and the set Eligibility admits
// is safe too. Distrusting the other nodes' claims (Plausible), as each
// node does, only makes a node stricter: it never commits where it would
// not have without it, and what it marks unreadable still counts where
// it counted. Nothing panics on any input.
func FuzzRules(f *testing.F) {
	f.Add([]byte{1, 1, 4, 1, 1, 0, 1, 0, 0, 1, 2, 1, 2, 1, 1, 0, 1})
	f.Add([]byte{2, 2, 6, 2, 1, 1, 0, 2, 1, 3, 2, 2, 1, 1, 0, 0, 2, 0, 1, 3, 2, 2, 1})
	f.Add([]byte{0, 0, 3, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 0})
	f.Add([]byte{1, 1, 3, 2, 1, 1, 0, 1, 0, 1, 2, 2, 1, 1, 0, 1, 1, 0, 1, 2, 2, 1, 1, 3, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, own := decodeSnapshot(data)
		now := t0
		checkDistrust(t, snap, own, now)
		if msg := unsafe(snap, now, 0); msg != "" {
			t.Skip("the snapshot is not safe to begin with:", msg)
		}
		q := Eligibility(snap, now, 0, nil)
		admitted := map[string]bool{}
		for _, n := range q.Admitted {
			admitted[n] = true
		}
		var as []Participant
		for _, p := range snap {
			if admitted[p.Name] {
				p.Claim.State = Holding
				as = append(as, p)
			}
		}
		if msg := unsafe(as, now, 0); msg != "" {
			t.Fatalf("eligibility admitted an unsafe set %v: %s", q.Admitted, msg)
		}
		for _, w := range q.Waiting {
			u := EligibilityUpTo(snap, now, 0, nil, w)
			if u.Eligible(w) != q.Eligible(w) || u.Blocked[w] != q.Blocked[w] || u.Skipped[w] != q.Skipped[w] || u.Position(w) != q.Position(w) {
				t.Fatalf("up to %s: eligible %v blocked %q skipped %q at %d; the whole queue: %v %q %q at %d",
					w, u.Eligible(w), u.Blocked[w], u.Skipped[w], u.Position(w), q.Eligible(w), q.Blocked[w], q.Skipped[w], q.Position(w))
			}
		}
		for _, w := range q.Waiting {
			checkFront(t, snap, w, now)
		}
		for i, self := range snap {
			if self.Claim.State != Entering || self.Err != nil {
				continue
			}
			v := Verify(self, own, snap, now, 0)
			if v.Decision != Commit {
				continue
			}
			after := append([]Participant(nil), snap...)
			after[i].Claim.State = Holding
			after[i].Claim.Limits = stricter(own, self.Claim.Limits)
			if msg := unsafe(after, now, 0); msg != "" {
				t.Fatalf("%s committed into an unsafe state: %s", self.Name, msg)
			}
		}
	})
}

// checkFront: the herd-free queue (docs/claims.md, "The third design").
// Each class (the same published limits and the same values of the
// labels they name) goes in queue order: a member behind W or more
// counted members of its class ahead of it (live ones, but not those
// blocked only in domains its rules do not name), W the class's width,
// is not admitted by the whole queue. And a member of the front (fewer
// than W+2 ahead, as Standing keeps it) that reads only the claims that
// bind it (active, unreadable, waiting with other limits) and the fronts
// of every class is admitted, or not, as over the whole queue. With and
// without a node passed over as silent.
func checkFront(t *testing.T, snap []Participant, self string, now time.Time) {
	t.Helper()
	i, binding, _ := splitBinding(snap, self, now)
	if snap[i].Claim.State != Waiting || snap[i].Err != nil {
		return
	}
	for _, skip := range []func(string) bool{nil, func(n string) bool { return n == "n1" }} {
		q := EligibilityUpTo(snap, now, 0, skip, "")
		ahead := map[string]int{} // waiting node -> counted members of its class ahead
		counted := map[string]int{}
		waiting := slices.DeleteFunc(slices.Clone(snap), func(p Participant) bool {
			return p.Claim.State != Waiting || p.Err != nil || p.active(now, 0)
		})
		slices.SortFunc(waiting, byQueueOrder)
		for _, p := range waiting {
			c := classKey(p)
			ahead[p.Name] = counted[c]
			live := p.Ready && (skip == nil || !skip(p.Name))
			if live && countsInClass(q.BlockedIn[p.Name], p.Claim.Limits) {
				counted[c]++
			}
		}
		me := snap[i]
		w := width(me)
		if ahead[self] >= w && q.Eligible(self) {
			t.Fatalf("%s: %d counted members of its class ahead, width %d, yet admitted", self, ahead[self], w)
		}
		if ahead[self] > w+1 {
			continue // behind the front: it does not decide
		}
		read := append(slices.Clone(binding), me)
		for _, p := range waiting {
			inFront := ahead[p.Name] <= width(p)+1 && p.Ready && (skip == nil || !skip(p.Name))
			if p.Name != self && inFront && !slices.ContainsFunc(read, func(r Participant) bool { return r.Name == p.Name }) {
				read = append(read, p)
			}
		}
		if unbound(waiting, read) {
			// A class none of whose members is in the front binds no
			// domain there (docs/claims.md, "Dead, stopped and NotReady
			// members"): verify reads it if it binds the node that
			// verifies, and a node waiting on one it lets go passes it
			// over after the grace.
			continue
		}
		if got, want := EligibilityUpTo(read, now, 0, skip, self).Eligible(self), q.Eligible(self); got != want {
			t.Fatalf("%s: eligible %v over the fronts and the claims that bind it, %v over the whole queue", self, got, want)
		}
	}
}

// unbound reports whether a waiting claim publishes group rules and no
// member of its class is in read.
func unbound(waiting, read []Participant) bool {
	for _, p := range waiting {
		if len(p.Claim.Limits.Groups) > 0 && !slices.ContainsFunc(read, func(r Participant) bool { return classKey(r) == classKey(p) }) {
			return true
		}
	}
	return false
}

// classKey names p's class: its published limits and its values of the
// labels they name, its Node's and recorded.
func classKey(p Participant) string {
	key := LimitsDigest(p.Claim.Limits)
	for _, g := range p.Claim.Limits.Groups {
		v, ok := p.Labels[g.Label]
		rv, rok := p.Claim.Groups[g.Label]
		key += fmt.Sprintf("|%s=%s,%v,%s,%v", g.Label, v, ok, rv, rok)
	}
	return key
}

// width is how many members of p's class can be admitted at once
// (queue.Class.Width, which this package cannot import).
func width(p Participant) int {
	w := p.Claim.Limits.Concurrency
	for _, g := range p.Claim.Limits.Groups {
		_, set := p.Labels[g.Label]
		_, recorded := p.Claim.Groups[g.Label]
		if set || recorded {
			w = min(w, g.Max)
		}
	}
	return max(w, 1)
}

// countsInClass: a member blocked only in domains of labels its own rules
// do not name holds no member of its class behind it back.
func countsInClass(blockedIn []string, l Limits) bool {
	if len(blockedIn) == 0 {
		return true
	}
	for _, label := range blockedIn {
		if label == "" || slices.ContainsFunc(l.Groups, func(g GroupLimit) bool { return g.Label == label }) {
			return true
		}
	}
	return false
}

// splitBinding finds self in snap (its index) and splits the others as
// a node reads them: the claims that bind it (active, not waiting,
// unreadable, or publishing other limits), and the rest.
func splitBinding(snap []Participant, self string, now time.Time) (i int, binding, rest []Participant) {
	i = slices.IndexFunc(snap, func(p Participant) bool { return p.Name == self })
	own := snap[i].Claim.Limits
	for _, p := range snap {
		switch {
		case p.Name == self:
		case p.active(now, 0) || p.Claim.State != Waiting || p.Err != nil || LimitsDigest(p.Claim.Limits) != LimitsDigest(own):
			binding = append(binding, p)
		default:
			rest = append(rest, p)
		}
	}
	return i, binding, rest
}

// stricter is what a node publishes when it announces: the smaller of its
// configuration and what it published before, rule by rule.
func stricter(a, b Limits) Limits {
	out := Limits{Concurrency: min(a.Concurrency, b.Concurrency)}
	for _, l := range []Limits{a, b} {
		for _, g := range l.Groups {
			found := false
			for i := range out.Groups {
				if out.Groups[i].Label == g.Label {
					out.Groups[i].Max = min(out.Groups[i].Max, g.Max)
					found = true
				}
			}
			if !found {
				out.Groups = append(out.Groups, g)
			}
		}
	}
	return out
}

// fuzzTolerance is the clock tolerance of FuzzRules: honest times in its
// snapshots are at most 3 s ahead of t0, forged ones an hour.
const fuzzTolerance = 5 * time.Second

// checkDistrust: Plausible makes an unbelievable claim fail safe without
// letting it count anywhere less, and the view of each entering node that
// distrusts the others commits only where the raw view commits too; the
// set Eligibility admits from a safe distrusted view is safe.
func checkDistrust(t *testing.T, snap []Participant, own Limits, now time.Time) {
	for _, p := range snap {
		q := Plausible(p, now, fuzzTolerance)
		switch {
		case q.Claim.State != p.Claim.State:
			t.Fatalf("%s: state %s became %s", p.Name, p.Claim.State, q.Claim.State)
		case p.active(now, 0) && !q.active(now, 0):
			t.Fatalf("%s: an active claim no longer counts", p.Name)
		case q.Err != nil && q.Claim.State.Active() && (q.Claim.Limits.Concurrency != 1 || q.Claim.Phase != PhaseUnknown):
			t.Fatalf("%s: distrusted active claim is not fail safe: %+v", p.Name, q.Claim)
		case q.Err == nil && p.Err == nil && hasFuture(p, now):
			t.Fatalf("%s: a claim with a time an hour ahead is believed", p.Name)
		}
		for _, v := range p.values(zoneLabel) {
			if !slices.Contains(q.values(zoneLabel), v) {
				t.Fatalf("%s: no longer counts in zone %s", p.Name, v)
			}
		}
	}
	for _, self := range snap {
		if self.Claim.State != Entering || self.Err != nil {
			continue
		}
		seen := make([]Participant, len(snap))
		for i, p := range snap {
			seen[i] = p
			if p.Name != self.Name {
				seen[i] = Plausible(p, now, fuzzTolerance)
			}
		}
		if v := Verify(self, own, seen, now, 0); v.Decision == Commit {
			if raw := Verify(self, own, snap, now, 0); raw.Decision != Commit {
				t.Fatalf("%s commits when it distrusts the others, but not when it believes them (%v: %s)", self.Name, raw.Decision, raw.Reason)
			}
		}
		if unsafe(seen, now, 0) != "" {
			continue
		}
		q := Eligibility(seen, now, 0, nil)
		var as []Participant
		for _, p := range seen {
			if slices.Contains(q.Admitted, p.Name) {
				p.Claim.State = Holding
				as = append(as, p)
			}
		}
		if msg := unsafe(as, now, 0); msg != "" {
			t.Fatalf("eligibility admitted an unsafe set %v from %s's view: %s", q.Admitted, self.Name, msg)
		}
	}
}

func hasFuture(p Participant, now time.Time) bool {
	c := p.Claim
	return c.Since.Sub(now) > fuzzTolerance || c.Updated.Sub(now) > fuzzTolerance || (c.Acquired != nil && c.Acquired.Sub(now) > fuzzTolerance)
}
