package queue

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// The Follower's explorer: one node behind the front, its real Follower
// deciding, three members of its class ahead of it whose state anyone may
// change at any moment between its requests (a node comes in or goes to
// the edge, announces or leaves, goes NotReady or comes back), each change
// of the node it follows delivered or lost by its watch. Reads are of the
// members as they are when the read is made, one span at a time as the
// Follower asks; a watch opened delivers the node as it is first, as a
// watch from resourceVersion 0 does. Every interleaving of up to fChanges
// changes and one lost event is explored. Then the changes stop, and the
// Follower must settle within two resyncs where docs/claims.md says: in
// the front when no live member is ahead, when the nearest is in, or when
// the nearest has no front label and no live member ahead has one (their
// daemons hang); otherwise following the nearest live member ahead. Until an event is lost, it comes into
// the front only where it would if the members between it and the node it
// follows were not there (it sees those at its next resync), or from
// reads that a change overtook.

// fState is a member's state as the explorer sets it.
type fState int8

const (
	fBehind fState = iota // waiting, no front label
	fEdge
	fIn
	fGone // announced, or left the queue
	fDown // NotReady (or marked stopped)
	fStates
)

func (s fState) String() string { return [...]string{"behind", "edge", "in", "gone", "down"}[s] }

func (s fState) live() bool { return s <= fIn }

// The members ahead, farthest first, and how far ahead of the follower
// each joined: the nearest in the first span it reads, the next in the
// second, the farthest only in the last (no lower bound).
var (
	fNames = [...]string{"m0", "m1", "m2"}
	fAhead = [...]time.Duration{time.Hour, time.Second, 100 * time.Millisecond}
)

// fChanges bounds the changes on a path: three made the run four times
// longer and found nothing two did not.
const fChanges = 2

// fWorld is the members, the faults left, the Follower and what it waits
// for.
type fWorld struct {
	m       [len(fNames)]fState
	changes int8 // changes the explorer may still make
	lose    bool // a watch event may still be lost
	// raced: a member changed while the Follower read (its reads are
	// of a few spans, one at a time, not one snapshot), since it last
	// watched.
	raced   bool
	now     time.Time
	f       *Follower
	a       FollowAction // the Follower's pending request
	watched string       // the node whose watch is open
}

var fSelf = node("self", claim.Waiting, "z1", 100, 2, 1)

func (w *fWorld) clone() *fWorld {
	c := *w
	f := *w.f
	f.ahead = slices.Clone(f.ahead)
	c.f = &f
	return &c
}

// key is the world and the Follower's state, times as the decisions
// compare them.
func (w *fWorld) key() string {
	f := w.f
	var ahead []string
	for _, p := range f.ahead {
		ahead = append(ahead, p.Name)
	}
	return fmt.Sprint(w.m, w.changes, w.lose, w.raced, w.watched, w.a.Kind, w.a.Of.Name, w.a.Span, w.a.Pred,
		w.a.Wake.Equal(f.notBefore), !w.now.Before(f.notBefore),
		f.pending, f.front, ahead, f.pred.Name, f.early, f.due, f.span, min(f.quiet, ResyncMaxShift), f.followed)
}

// participant is member i as a read or its watch shows it.
func (w *fWorld) participant(i int) claim.Participant {
	p := node(fNames[i], claim.Waiting, "z1", 0, 2, 1)
	p.Claim.Since = fSelf.Claim.Since.Add(-fAhead[i])
	switch w.m[i] {
	case fEdge:
		p.Labels[FrontLabel] = string(RoleEdge)
	case fIn:
		p.Labels[FrontLabel] = string(RoleIn)
	case fGone:
		p.Claim.State = claim.Entering
	case fDown:
		p.Ready = false
	}
	return p
}

// read is what a read of the span-th span ahead of of returns: the
// members whose place is in it, and the follower itself (a read of
// those ahead of a member returns the nodes behind it too).
func (w *fWorld) read(of claim.Participant, span int) []claim.Participant {
	out := []claim.Participant{fSelf}
	for i := range fNames {
		p := w.participant(i)
		ahead := of.Claim.Since.Sub(p.Claim.Since)
		if ahead >= 0 && (span >= len(spans) || ahead < spans[span]) {
			out = append(out, p)
		}
	}
	return out
}

func (w *fWorld) index(name string) int { return slices.Index(fNames[:], name) }

// stepper is the Follower's Step, or a broken variant of it.
type stepper func(f *Follower, ev FollowEvent) FollowAction

// step gives the Follower ev and takes its next request; a watch of a
// node not watched yet delivers that node first.
func (w *fWorld) step(step stepper, ev FollowEvent) {
	ev.Now = w.now
	w.a = step(w.f, ev)
	if w.a.Kind == WatchPred {
		w.raced = false
	}
	w.open(step)
}

func (w *fWorld) open(step stepper) {
	if w.a.Kind == WatchPred && w.watched != w.a.Pred {
		w.watched = w.a.Pred
		w.step(step, FollowEvent{Kind: Changed, Pred: w.participant(w.index(w.a.Pred))})
	}
	if w.a.Kind != WatchPred {
		w.watched = ""
	}
}

// answer does the pending request, as the lock would, and steps.
func (w *fWorld) answer(step stepper) {
	switch w.a.Kind {
	case ReadAhead:
		w.step(step, FollowEvent{Kind: Found, Read: w.read(w.a.Of, w.a.Span)})
	case ReadFront:
		var front []claim.Participant
		for i := range fNames {
			if w.m[i] == fEdge || w.m[i] == fIn {
				front = append(front, w.participant(i))
			}
		}
		w.step(step, FollowEvent{Kind: Found, Read: front})
	case RecheckOwn:
		w.step(step, FollowEvent{Kind: Rechecked, Self: fSelf})
	case WatchPred:
		w.now = w.a.Wake
		w.step(step, FollowEvent{Kind: Woke})
	}
}

// fMove is a next world and what made it.
type fMove struct {
	to   *fWorld
	what string
}

func (w *fWorld) moves(step stepper) []fMove {
	if w.a.Kind == EnterFront {
		return nil
	}
	n := w.clone()
	n.answer(step)
	out := []fMove{{n, "answer " + show(w.a)}}
	if w.changes == 0 {
		return out
	}
	for i := range fNames {
		for s := range fStates {
			if s == w.m[i] {
				continue
			}
			what := fmt.Sprintf("%s becomes %s", fNames[i], s)
			n := w.clone()
			n.m[i], n.changes = s, n.changes-1
			n.raced = n.raced || n.a.Kind == ReadAhead || n.a.Kind == RecheckOwn
			if n.a.Kind != WatchPred || n.watched != fNames[i] {
				out = append(out, fMove{n, what})
				continue
			}
			if w.lose {
				lost := n.clone()
				lost.lose = false
				out = append(out, fMove{lost, what + " (its watch loses it)"})
			}
			n.step(step, FollowEvent{Kind: Changed, Pred: n.participant(i)})
			out = append(out, fMove{n, what})
		}
	}
	return out
}

// want is where the Follower must settle in w: "" for the front, or the
// node it follows; from the members at index from and ahead.
func (w *fWorld) want(from int) string {
	for i := from; i >= 0; i-- {
		if !w.m[i].live() {
			continue
		}
		// No front ahead: no live member ahead with a front label.
		frontless := !slices.ContainsFunc(w.m[:i], func(s fState) bool { return s == fEdge || s == fIn })
		if w.m[i] == fIn || (w.m[i] == fBehind && frontless) {
			return ""
		}
		return fNames[i]
	}
	return ""
}

// settle runs the Follower with the changes stopped until it is in the
// front or has gone through two resyncs, and says what is wrong with
// where it ends, if anything.
func (w *fWorld) settle(step stepper) string {
	w = w.clone()
	want := w.want(len(fNames) - 1)
	for resyncs, i := 0, 0; i < 100 && (resyncs < 2 || w.a.Kind != WatchPred); i++ {
		switch w.a.Kind {
		case EnterFront:
			// After a lost event, the Follower may come in on what it
			// saw before: the front then counts it behind and sends it
			// back, at the cost of a few reads. A watch that delivers
			// every change never brings it in when it should follow
			// the node it follows or one ahead of that (a member that
			// came between them since its read, stepped back in its
			// place, is seen at the next resync, or by the front), but
			// when a member changed while it read (what it read was so
			// when it read it).
			from := w.index(w.f.pred.Name)
			if from < 0 {
				from = len(fNames) - 1
			}
			if should := w.want(from); should != "" && w.lose && !w.raced {
				return "entered the front, should follow " + should
			}
			return ""
		case RecheckOwn:
			resyncs++
		}
		w.answer(step)
	}
	if w.a.Kind != WatchPred || w.a.Pred != want {
		if want == "" {
			return "still " + show(w.a) + " after two resyncs, should be in the front"
		}
		return "still " + show(w.a) + " after two resyncs, should follow " + want
	}
	return ""
}

// exploreFollower explores every interleaving from a follower that left
// the front 5 s ago at most (its notBefore) and from every state of the
// members; it returns the number of states and the first wrong ending,
// with its path.
func exploreFollower(step stepper) (int, string) {
	type visit struct {
		from *fWorld
		what string
	}
	seen := map[string]visit{}
	var queue []*fWorld
	for c := range int(fStates * fStates * fStates) {
		w := &fWorld{changes: fChanges, lose: true, now: t0,
			f: NewFollower(fSelf, t0.Add(5*time.Second), func(d time.Duration) time.Duration { return d })}
		w.m = [3]fState{fState(c % int(fStates)), fState(c / int(fStates) % int(fStates)), fState(c / int(fStates) / int(fStates))}
		w.a = w.f.Start()
		seen[w.key()] = visit{what: fmt.Sprint("start: ", w.m)}
		queue = append(queue, w)
	}
	path := func(w *fWorld) string {
		var steps []string
		for k := w.key(); ; {
			v := seen[k]
			steps = append(steps, v.what)
			if v.from == nil {
				break
			}
			k = v.from.key()
		}
		slices.Reverse(steps)
		return strings.Join(steps, "\n  ")
	}
	for len(queue) > 0 {
		w := queue[0]
		queue = queue[1:]
		if bad := w.settle(step); bad != "" {
			return len(seen), bad + " (members " + fmt.Sprint(w.m) + "):\n  " + path(w)
		}
		for _, m := range w.moves(step) {
			if k := m.to.key(); seen[k] == (visit{}) {
				seen[k] = visit{w, m.what}
				queue = append(queue, m.to)
			}
		}
	}
	return len(seen), ""
}

// TestExploreFollower: the real Follower settles where it must from every
// state the explorer reaches.
func TestExploreFollower(t *testing.T) {
	states, bad := exploreFollower((*Follower).Step)
	t.Logf("%d states", states)
	if bad != "" {
		t.Fatal(bad)
	}
}

// TestExploreFollowerFindsBrokenRules: each rule of the Follower broken by
// hand is found, with its path.
func TestExploreFollowerFindsBrokenRules(t *testing.T) {
	tests := []struct {
		name string
		step stepper
	}{
		{"a predecessor that cannot go is followed on", func(f *Follower, ev FollowEvent) FollowAction {
			if ev.Kind == Changed && !ev.Left && ev.Pred.Name == f.pred.Name && !Live(ev.Pred, nil) {
				return f.watch()
			}
			return f.Step(ev)
		}},
		{"no resync", func(f *Follower, ev FollowEvent) FollowAction {
			if ev.Kind == Woke && !f.early {
				f.resync = ev.Now.Add(time.Hour)
				return f.watch()
			}
			return f.Step(ev)
		}},
		{"a class without a front is followed for ever", func(f *Follower, ev FollowEvent) FollowAction {
			if ev.Kind == Found && f.front {
				f.front = false
				return f.follow(f.pred, ev.Now)
			}
			return f.Step(ev)
		}},
		{"no wider span read", func(f *Follower, ev FollowEvent) FollowAction {
			if ev.Kind == Found && len(Ahead(f.self, ev.Read)) == 0 {
				f.pending = len(spans)
			}
			return f.Step(ev)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states, bad := exploreFollower(tt.step)
			if bad == "" {
				t.Fatalf("not found in %d states", states)
			}
			t.Logf("found in %d states: %s", states, bad)
		})
	}
}
