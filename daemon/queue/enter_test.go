package queue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// TestEntrant: every transition of an entering node after a verify, and
// after the last look before its commit.
func TestEntrant(t *testing.T) {
	one := claim.Limits{Concurrency: 1}
	entering := func(name string, ago time.Duration) claim.Participant {
		return claim.Participant{Name: name, Ready: true, Labels: map[string]string{}, Claim: claim.Claim{
			State: claim.Entering, Since: t0.Add(-ago), Limits: one}}
	}
	holding := func(name string) claim.Participant {
		p := entering(name, time.Hour)
		p.Claim.State, p.Claim.Acquired = claim.Holding, &t0
		return p
	}
	waiting := func(name string, ago time.Duration) claim.Participant {
		p := entering(name, ago)
		p.Claim.State = claim.Waiting
		return p
	}
	me := entering("me", time.Minute)
	read := func(now time.Time, snap ...claim.Participant) Verified {
		return Verified{Now: now, Server: t0, Announced: true, Whole: true, Own: one, Snap: append([]claim.Participant{me}, snap...)}
	}
	alone := read(t0)
	full := read(t0, holding("h"))                     // a holder in the way: step back
	behind := read(t0, entering("later", time.Second)) // an entering claim behind: stay
	edited, partial, held := alone, alone, alone
	edited.Announced, partial.Whole, held.Held = false, false, errors.New("held: change 42")
	turn := read(t0, waiting("first", time.Hour)) // a waiting node whose turn it is
	silent := turn
	silent.Silent = func(name string) bool { return name == "first" }
	down := read(t0, waiting("first", time.Hour))
	down.Snap[1].Ready = false
	// L1: w waits first and publishes concurrency 1; e announced behind
	// this node (concurrency 2) and its machine is dead. w cannot go
	// while e is there: giving way to it left the slots idle for ever.
	two := claim.Limits{Concurrency: 2}
	stuck := read(t0, waiting("w", time.Hour), entering("e", time.Second))
	stuck.Own, stuck.Snap[0].Claim.Limits, stuck.Snap[2].Claim.Limits = two, two, two

	type step struct {
		v    Verified
		want EnterAction
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"commits when every limit holds", []step{{alone, EnterAction{Move: EnterCommit}}}},
		// The second review's S1: an admin set the label alone back to
		// waiting after the announce; never commit on it.
		{"reads its own claim again when it changed under it", []step{{edited, EnterAction{Move: EnterReread, Reason: "its own claim changed under it"}}}},
		{"reads its own Node when the read's version is not the one read whole", []step{{partial, EnterAction{Move: EnterReread, Reason: "reading its own Node"}}}},
		{"refuses when its Node is held", []step{{held, EnterAction{Move: EnterRefuse, Reason: "held: change 42"}}}},
		{"a first step back waits the least", []step{{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: MinStepBack}}}},
		{"step backs in a row double the wait, up to the most", []step{
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: MinStepBack}},
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: 2 * MinStepBack}},
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: 4 * MinStepBack}},
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: 8 * MinStepBack}},
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: 16 * MinStepBack}},
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: MaxStepBack}},
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: MaxStepBack}},
		}},
		{"a commit resets the back-off", []step{
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: MinStepBack}},
			{alone, EnterAction{Move: EnterCommit}},
			{full, EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: MinStepBack}},
		}},
		{"stays while entering claims behind it are in the way", []step{
			{behind, EnterAction{Move: EnterStay, Reason: reason(behind), Wait: StayLook}},
			{at(behind, GiveWayAfter), EnterAction{Move: EnterStay, Reason: reason(behind), Wait: StayLook}},
		}},
		{"gives way when they stay past the time to step back", []step{
			{behind, EnterAction{Move: EnterStay, Reason: reason(behind), Wait: StayLook}},
			{at(behind, GiveWayAfter+time.Millisecond), EnterAction{Move: EnterStepBack, Reason: reason(behind) + "; they have not stepped back"}},
			// The count starts over after the step back.
			{at(behind, 2*GiveWayAfter), EnterAction{Move: EnterStay, Reason: reason(behind), Wait: StayLook}},
		}},
		{"a step back ends the stay's count", []step{
			{behind, EnterAction{Move: EnterStay, Reason: reason(behind), Wait: StayLook}},
			{at(full, time.Second), EnterAction{Move: EnterStepBack, Reason: reason(full), Wait: MinStepBack}},
			{at(behind, GiveWayAfter+2*time.Second), EnterAction{Move: EnterStay, Reason: reason(behind), Wait: StayLook}},
		}},
		{"yields to a waiting node whose turn it is", []step{{turn, EnterAction{Move: EnterStepBack, Reason: yieldReason(turn), Wait: MinStepBack}}}},
		{"does not yield to one the front passes over", []step{{silent, EnterAction{Move: EnterCommit}}}},
		{"does not yield to a NotReady node ahead", []step{{down, EnterAction{Move: EnterCommit}}}},
		// The second review's L1 (above).
		{"does not yield to a node ahead that cannot go now", []step{{stuck, EnterAction{Move: EnterStay, Reason: reason(stuck), Wait: StayLook}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEntrant("me")
			for i, s := range tt.steps {
				if got := e.Verified(s.v); got != s.want {
					t.Fatalf("verify %d: %+v, want %+v", i, got, s.want)
				}
			}
		})
	}

	t.Run("the last look before the commit", func(t *testing.T) {
		e := NewEntrant("me")
		if got, want := e.Checked(nil), (EnterAction{Move: EnterCommit}); got != want {
			t.Errorf("Checked(nil) = %+v, want %+v", got, want)
		}
		if got, want := e.Checked(errors.New("paused")), (EnterAction{Move: EnterRefuse, Reason: "paused"}); got != want {
			t.Errorf("Checked(paused) = %+v, want %+v", got, want)
		}
	})
	t.Run("a stay counts from the announce after a wait", func(t *testing.T) {
		e := NewEntrant("me")
		e.Verified(behind)
		e.Waiting()
		if got := e.Verified(at(behind, GiveWayAfter+time.Second)); got.Move != EnterStay {
			t.Errorf("after waiting again: %+v, want a stay", got)
		}
	})
}

// at is v read d after t0 by this host's clock.
func at(v Verified, d time.Duration) Verified {
	v.Now = t0.Add(d)
	return v
}

// reason is claim.Verify's reason for the node "me" in v.
func reason(v Verified) string {
	return claim.Verify(v.Snap[0], v.Own, v.Snap, v.Server, v.TTL).Reason
}

func yieldReason(v Verified) string {
	_, why := claim.Yield(v.Snap[0], v.Snap, v.Server, v.TTL, v.Silent)
	return why
}

func TestPublishIsTheStricter(t *testing.T) {
	tests := []struct {
		name      string
		own, prev claim.Limits
		want      claim.Limits
	}{
		{"first announce", claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: "z", Max: 2}}}, claim.Limits{},
			claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: "z", Max: 2}}}},
		{"restarted with a laxer config keeps what it published", claim.Limits{Concurrency: 5}, claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}},
			claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}}},
		{"restarted with a stricter config publishes it", claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}}, claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 2}}},
			claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}}},
		{"restarted with a laxer zone limit keeps the stricter one", claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: "z", Max: 2}}}, claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}},
			claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}}},
		{"each the stricter: concurrency from one, a rule from each", claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 1}, {Label: "r", Max: 3}}}, claim.Limits{Concurrency: 4, Groups: []claim.GroupLimit{{Label: "r", Max: 2}}},
			claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 1}, {Label: "r", Max: 2}}}},
		{"restarted with other rules, too many together: one slot", claim.Limits{Concurrency: 4, Groups: rules("new", 9)}, claim.Limits{Concurrency: 3, Groups: rules("old", 9)},
			claim.Limits{Concurrency: 1, Groups: rules("new", 9)}},
		{"restarted with other rules, at the bound", claim.Limits{Concurrency: 4, Groups: rules("new", 8)}, claim.Limits{Concurrency: 3, Groups: rules("old", 8)},
			claim.Limits{Concurrency: 3, Groups: append(rules("new", 8), rules("old", 8)...)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Publish(tt.own, tt.prev)
			if got.Concurrency != tt.want.Concurrency || !slices.Equal(got.Groups, tt.want.Groups) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// rules are n group rules on labels prefix/0, prefix/1, ….
func rules(prefix string, n int) []claim.GroupLimit {
	out := make([]claim.GroupLimit, n)
	for i := range out {
		out[i] = claim.GroupLimit{Label: fmt.Sprintf("example.com/%s-%d", prefix, i), Max: 1}
	}
	return out
}
