package lock

import (
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// TestEnteringNext: every transition of an entering node after a verify.
func TestEnteringNext(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	commit := claim.Verdict{Decision: claim.Commit}
	back := claim.Verdict{Decision: claim.StepBack, Reason: "zone-a is full"}
	stay := claim.Verdict{Decision: claim.Stay, Reason: "a node ahead is entering"}
	tests := []struct {
		name   string
		e      entering
		v      claim.Verdict
		now    time.Time
		want   entering
		action enterAction
	}{
		{"commit resets the back-off", entering{backoff: 4 * time.Second, stayingSince: t0}, commit, t0.Add(time.Second),
			entering{backoff: minStepBack}, enterAction{Move: moveCommit}},
		{"a first step back waits the least", entering{backoff: minStepBack}, back, t0,
			entering{backoff: 2 * minStepBack}, enterAction{Move: moveStepBack, Reason: back.Reason, Wait: minStepBack}},
		{"step backs in a row double the wait", entering{backoff: 800 * time.Millisecond}, back, t0,
			entering{backoff: 1600 * time.Millisecond}, enterAction{Move: moveStepBack, Reason: back.Reason, Wait: 800 * time.Millisecond}},
		{"the back-off stops at its most", entering{backoff: maxStepBack}, back, t0,
			entering{backoff: maxStepBack}, enterAction{Move: moveStepBack, Reason: back.Reason, Wait: maxStepBack}},
		{"a first stay starts the count", entering{backoff: minStepBack}, stay, t0,
			entering{backoff: minStepBack, stayingSince: t0}, enterAction{Move: moveStay, Reason: stay.Reason, Wait: stayLook}},
		{"a stay within the time to give way", entering{backoff: minStepBack, stayingSince: t0}, stay, t0.Add(giveWayAfter),
			entering{backoff: minStepBack, stayingSince: t0}, enterAction{Move: moveStay, Reason: stay.Reason, Wait: stayLook}},
		{"a stay past it gives way at once", entering{backoff: minStepBack, stayingSince: t0}, stay, t0.Add(giveWayAfter + time.Millisecond),
			entering{backoff: minStepBack, stayingSince: t0}, enterAction{Move: moveStepBack, Reason: stay.Reason + "; they have not stepped back"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, action := tt.e.next(tt.v, tt.now)
			if got != tt.want || action != tt.action {
				t.Errorf("next(%+v) = %+v, %+v; want %+v, %+v", tt.v, got, action, tt.want, tt.action)
			}
		})
	}
}
