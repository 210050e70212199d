package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// TestFollower runs the Follower through scripts of what its reads and
// watch show, one row per transition, and checks each request it makes.
func TestFollower(t *testing.T) {
	self := node("self", claim.Waiting, "z1", 100, 3, 1)
	p1 := node("p1", claim.Waiting, "z1", 90, 3, 1)
	p2 := node("p2", claim.Waiting, "z1", 80, 3, 1)
	with := func(p claim.Participant, mut func(*claim.Participant)) claim.Participant {
		p.Labels = map[string]string{zone: p.Labels[zone]}
		mut(&p)
		return p
	}
	in := with(p1, func(p *claim.Participant) { p.Labels[FrontLabel] = string(RoleIn) })
	edge := with(p1, func(p *claim.Participant) { p.Labels[FrontLabel] = string(RoleEdge) })
	notReady := with(p1, func(p *claim.Participant) { p.Ready = false })
	announced := with(p1, func(p *claim.Participant) { p.Claim.State = claim.Entering })
	otherZone := node("o", claim.Waiting, "z2", 95, 3, 1)
	behind := node("b", claim.Waiting, "z1", 110, 3, 1)

	at := func(d time.Duration) time.Time { return t0.Add(d) }
	found := func(now time.Duration, ps ...claim.Participant) FollowEvent {
		return FollowEvent{Kind: Found, Now: at(now), Read: ps}
	}
	changed := func(now time.Duration, p claim.Participant) FollowEvent {
		return FollowEvent{Kind: Changed, Now: at(now), Pred: p}
	}
	left := func(now time.Duration, name string) FollowEvent {
		return FollowEvent{Kind: Changed, Now: at(now), Pred: claim.Participant{Name: name}, Left: true}
	}
	woke := func(now time.Duration) FollowEvent { return FollowEvent{Kind: Woke, Now: at(now)} }
	rechecked := func(now time.Duration) FollowEvent { return FollowEvent{Kind: Rechecked, Now: at(now), Self: self} }
	read := func(of string, span int) FollowAction {
		return FollowAction{Kind: ReadAhead, Of: claim.Participant{Name: of}, Span: span}
	}
	watch := func(pred string, wake time.Duration) FollowAction {
		return FollowAction{Kind: WatchPred, Pred: pred, Wake: at(wake)}
	}
	enter := func(why string) FollowAction { return FollowAction{Kind: EnterFront, Why: why} }
	recheck := FollowAction{Kind: RecheckOwn}
	readFront := FollowAction{Kind: ReadFront, Of: claim.Participant{Name: "self"}}
	p2edge := with(p2, func(p *claim.Participant) { p.Labels[FrontLabel] = string(RoleEdge) })
	// behindIn: in the front, but behind self (it does not count).
	behindIn := with(behind, func(p *claim.Participant) { p.Labels[FrontLabel] = string(RoleIn) })
	const every = ResyncEvery

	type step struct {
		ev   FollowEvent
		want FollowAction
	}
	tests := []struct {
		name      string
		notBefore time.Duration // after t0; 0: none
		steps     []step
	}{
		{"alone in its class: every span read, then the front", 0, []step{
			{found(0), read("self", 1)},
			{found(0, otherZone, behind), read("self", 2)},
			{found(0), read("self", 3)},
			{found(0), read("self", 4)},
			{found(0), enter("the first live member of its class")},
		}},
		{"the nearest live member ahead is followed, its resync due", 0, []step{
			{found(0, p2, p1, behind), watch("p1", every)},
			{changed(time.Second, edge), watch("p1", every)},
		}},
		{"a wider span holds the predecessor", 0, []step{
			{found(0), read("self", 1)},
			{found(time.Second, p2), watch("p2", time.Second+every)},
		}},
		{"the predecessor comes in: enter", 0, []step{
			{found(0, p1), watch("p1", every)},
			{changed(time.Minute, in), enter("the node ahead is in the front")},
		}},
		{"in too soon after leaving the front: wait until notBefore", 5 * time.Second, []step{
			{found(0, p1), watch("p1", every)},
			{changed(time.Second, in), watch("p1", 5*time.Second)},
			{changed(2*time.Second, in), watch("p1", 5*time.Second)},
			{woke(5 * time.Second), enter("the node ahead is in the front")},
		}},
		{"in too soon, then back to the edge: the wait is off", 5 * time.Second, []step{
			{found(0, p1), watch("p1", every)},
			{changed(time.Second, in), watch("p1", 5*time.Second)},
			{changed(2*time.Second, edge), watch("p1", every)},
			{woke(5 * time.Second), watch("p1", every)},
		}},
		{"in after notBefore: enter at once", 5 * time.Second, []step{
			{found(0, p1), watch("p1", every)},
			{changed(6*time.Second, in), enter("the node ahead is in the front")},
		}},
		{"NotReady: the next one as read, no read", 0, []step{
			{found(0, p1, p2), watch("p1", every)},
			{changed(time.Second, notReady), watch("p2", time.Second+every)},
		}},
		{"NotReady and none left: the span that held them is read again", 0, []step{
			{found(0), read("self", 1)},
			{found(0, p1), watch("p1", every)},
			{changed(time.Second, notReady), read("self", 1)},
		}},
		{"announced: read again from the nearest span", 0, []step{
			{found(0), read("self", 1)},
			{found(0, p1), watch("p1", every)},
			{changed(time.Second, announced), read("self", 0)},
		}},
		{"deleted, or its claim removed: read again", 0, []step{
			{found(0, p1), watch("p1", every)},
			{left(time.Second, "p1"), read("self", 0)},
		}},
		{"a change of a node no longer followed is ignored", 0, []step{
			{found(0, p1, p2), watch("p1", every)},
			{changed(time.Second, notReady), watch("p2", time.Second+every)},
			{left(2*time.Second, "p1"), watch("p2", time.Second+every)},
		}},
		{"woken before the resync: keep watching", 0, []step{
			{found(0, p1), watch("p1", every)},
			{woke(time.Minute), watch("p1", every)},
		}},
		{"each resync that finds the same predecessor doubles the next, up to eight times", 0, []step{
			{found(0, edge), watch("p1", every)},
			{woke(every), recheck},
			{rechecked(every), read("self", 0)},
			{found(every, edge), watch("p1", 3*every)},
			{woke(3 * every), recheck},
			{rechecked(3 * every), read("self", 0)},
			{found(3*every, edge), watch("p1", 7*every)},
			{woke(7 * every), recheck},
			{rechecked(7 * every), read("self", 0)},
			{found(7*every, edge), watch("p1", 15*every)},
			{woke(15 * every), recheck},
			{rechecked(15 * every), read("self", 0)},
			{found(15*every, edge), watch("p1", 23*every)},
		}},
		{"a resync reads first the span that held the predecessor", 0, []step{
			{found(0), read("self", 1)},
			{found(0, edge), watch("p1", every)},
			{woke(every), recheck},
			{rechecked(every), read("self", 1)},
		}},
		{"the predecessor moves: the resyncs start again", 0, []step{
			{found(0, edge), watch("p1", every)},
			{woke(every), recheck},
			{rechecked(every), read("self", 0)},
			{found(every, p2edge), watch("p2", 2*every)},
		}},
		{"a resync finds the predecessor without a front label and no front ahead: enter", 0, []step{
			{found(0, p1), watch("p1", every)},
			{woke(every), recheck},
			{rechecked(every), read("self", 0)},
			{found(every, p1), readFront},
			{found(every, self, behindIn), enter("no node of its class ahead of it is in the front")},
		}},
		{"a resync finds a front ahead: follow the predecessor again", 0, []step{
			{found(0, p1), watch("p1", every)},
			{woke(every), recheck},
			{rechecked(every), read("self", 0)},
			{found(every, p1), readFront},
			{found(every, p2edge), watch("p1", 3*every)},
		}},
		{"a front of NotReady members is no front", 0, []step{
			{found(0, p1), watch("p1", every)},
			{woke(every), recheck},
			{rechecked(every), read("self", 0)},
			{found(every, p1), readFront},
			{found(every, with(p2edge, func(p *claim.Participant) { p.Ready = false })), enter("no node of its class ahead of it is in the front")},
		}},
		{"a resync with a predecessor in the front reads no front", 0, []step{
			{found(0, edge), watch("p1", every)},
			{woke(every), recheck},
			{rechecked(every), read("self", 0)},
			{found(every, edge), watch("p1", 3*every)},
		}},
		{"the predecessor takes a slot from the front: enter", 0, []step{
			{found(0, p1), watch("p1", every)},
			{changed(time.Minute, with(p1, func(p *claim.Participant) {
				p.Labels[FrontLabel], p.Claim.State = string(RoleIn), claim.Entering
			})), enter("the node ahead is in the front")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var notBefore time.Time
			if tt.notBefore > 0 {
				notBefore = at(tt.notBefore)
			}
			f := NewFollower(self, notBefore, func(d time.Duration) time.Duration { return d })
			if got := f.Start(); !sameAction(got, read("self", 0)) {
				t.Fatalf("Start = %s, want a read of the first span", show(got))
			}
			for i, s := range tt.steps {
				if got := f.Step(s.ev); !sameAction(got, s.want) {
					t.Fatalf("step %d: got %s, want %s", i, show(got), show(s.want))
				}
			}
		})
	}
}

func sameAction(a, b FollowAction) bool {
	return a.Kind == b.Kind && a.Of.Name == b.Of.Name && a.Span == b.Span && a.Pred == b.Pred &&
		a.Wake.Equal(b.Wake) && a.Why == b.Why
}

func show(a FollowAction) string {
	switch a.Kind {
	case ReadAhead:
		return fmt.Sprintf("read ahead of %s, span %d", a.Of.Name, a.Span)
	case ReadFront:
		return "read the front of " + a.Of.Name + "'s class"
	case RecheckOwn:
		return "recheck own"
	case WatchPred:
		return fmt.Sprintf("watch %s, wake at t0+%v", a.Pred, a.Wake.Sub(t0))
	default:
		return "enter: " + a.Why
	}
}
