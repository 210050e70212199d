package claim

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestPlausible(t *testing.T) {
	const tol = 5 * time.Minute
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	holder := func(zone string, acquired time.Duration) Participant {
		p := node("h", Holding, zone, -60, 3, 1)
		p.Claim.Acquired = at(acquired)
		p.Claim.Updated = *p.Claim.Acquired
		return p
	}
	tests := []struct {
		name   string
		p      func() Participant
		bad    bool
		says   []string // in the error
		active bool     // still takes a slot
	}{
		{"an honest holder", func() Participant { return holder("a", -time.Minute) }, false, nil, true},
		{"acquired within the tolerance ahead", func() Participant { return holder("a", tol) }, false, nil, true},
		{"acquired beyond the tolerance", func() Participant { return holder("a", tol+time.Millisecond) }, true,
			[]string{"updated is 5m0.001s and acquired is 5m0.001s ahead of the API server's clock", "clock tolerance of 5m0s",
				"this host's or that node's clock is wrong, or the claim is forged"}, true},
		{"acquired an hour ahead, updated honest", func() Participant {
			p := holder("a", time.Hour)
			p.Claim.Updated = t0
			return p
		}, true, []string{"acquired is 1h0m0s ahead"}, true},
		{"updated ahead on an entering claim", func() Participant {
			p := node("e", Entering, "a", 0, 2, 1)
			p.Claim.Updated = t0.Add(time.Hour)
			return p
		}, true, []string{"updated is 1h0m0s ahead"}, true},
		{"since ahead on a holder", func() Participant {
			p := holder("a", -time.Minute)
			p.Claim.Since = t0.Add(10 * time.Minute)
			return p
		}, true, []string{"since is 10m0s ahead"}, true},
		{"since ahead on a waiting claim", func() Participant { return node("w", Waiting, "a", 3600, 2, 1) }, true,
			[]string{"since is 1h0m0s ahead"}, false},
		{"since within the tolerance on a waiting claim", func() Participant { return node("w", Waiting, "a", 300, 2, 1) }, false, nil, false},
		{"a past since is not a reason (fairness only)", func() Participant { return node("w", Waiting, "a", -86400, 2, 1) }, false, nil, false},
		{"holder relabelled into another zone", func() Participant {
			p := holder("b", -time.Minute)
			p.Claim.Groups = map[string]string{zoneLabel: "a"}
			return p
		}, true, []string{`it recorded group topology.kubernetes.io/zone="a" but the node's label is "b": relabelled while holding, or forged`}, true},
		{"entering claim recording a zone its node lacks", func() Participant {
			p := node("e", Entering, "", 0, 2, 1)
			p.Claim.Groups = map[string]string{zoneLabel: "a"}
			return p
		}, true, []string{`it recorded group topology.kubernetes.io/zone="a" but the node has no topology.kubernetes.io/zone label: relabelled while entering, or forged`}, true},
		{"a recorded key that no rule names still counts", func() Participant {
			p := holder("a", -time.Minute)
			p.Claim.Groups = map[string]string{zoneLabel: "a", "rack": "r1"}
			return p
		}, true, []string{`group rack="r1" but the node has no rack label`}, true},
		{"a forged key is quoted", func() Participant {
			p := holder("a", -time.Minute)
			p.Claim.Groups = map[string]string{zoneLabel: "a", "\x1b[2J": "x"}
			return p
		}, true, []string{`group "\x1b[2J"="x"`}, true},
		{"a current label the claim did not record is not a reason", func() Participant {
			p := holder("a", -time.Minute)
			p.Claim.Groups = nil
			p.Labels["rack"] = "r1"
			return p
		}, false, nil, true},
		{"a waiting claim's groups are not checked", func() Participant {
			p := node("w", Waiting, "b", 0, 2, 1)
			p.Claim.Groups = map[string]string{zoneLabel: "a", "rack": "r1"}
			return p
		}, false, nil, false},
		{"both reasons at once", func() Participant {
			p := holder("b", time.Hour)
			p.Claim.Groups = map[string]string{zoneLabel: "a"}
			return p
		}, true, []string{"acquired is 1h0m0s ahead", "relabelled while holding"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.p()
			groups := maps.Clone(in.Claim.Groups)
			got := Plausible(in, t0, tol)
			if (got.Err != nil) != tt.bad {
				t.Fatalf("err = %v, want implausible %v", got.Err, tt.bad)
			}
			if got.Active(t0, 0) != tt.active || got.Claim.State != in.Claim.State {
				t.Errorf("state %s active %v, want %s active %v", got.Claim.State, got.Active(t0, 0), in.Claim.State, tt.active)
			}
			if !maps.Equal(got.Claim.Groups, groups) || !maps.Equal(in.Claim.Groups, groups) {
				t.Errorf("recorded groups %v (input now %v), want %v kept", got.Claim.Groups, in.Claim.Groups, groups)
			}
			if !tt.bad {
				if got.Claim.Limits.Concurrency != in.Claim.Limits.Concurrency || got.Claim.Phase != in.Claim.Phase {
					t.Errorf("a plausible claim changed: %+v", got.Claim)
				}
				return
			}
			if !errors.Is(got.Err, ErrImplausible) || !errors.Is(got.Err, ErrUnparsable) {
				t.Errorf("err %v is not ErrImplausible and ErrUnparsable", got.Err)
			}
			if got.Claim.Limits.Concurrency != 1 || len(got.Claim.Limits.Groups) != 0 {
				t.Errorf("limits %+v, want concurrency 1 (fail safe)", got.Claim.Limits)
			}
			if in.Claim.State.Active() && got.Claim.Phase != PhaseUnknown {
				t.Errorf("phase %q, want %q", got.Claim.Phase, PhaseUnknown)
			}
			for _, s := range tt.says {
				if !strings.Contains(got.Err.Error(), s) {
					t.Errorf("error %q does not say %q", got.Err, s)
				}
			}
		})
	}
}

// TestPlausibleKeepsAnUnreadableClaim: a claim that could not be parsed
// keeps its own error.
func TestPlausibleKeepsAnUnreadableClaim(t *testing.T) {
	c, err := Parse("rebooting", "{}")
	p := Participant{Name: "x", Claim: c, Err: err}
	if got := Plausible(p, t0, time.Minute); got.Err != err {
		t.Errorf("err %v, want %v", got.Err, err)
	}
}

// TestImplausibleHolderIsNeverCountedOut: a holder acquired in the future
// raises the unreadable alarm at once, counts with concurrency 1, and no
// TTL ever counts it out, however late it is looked at.
func TestImplausibleHolderIsNeverCountedOut(t *testing.T) {
	forged := node("forger", Holding, "a", 0, 3, 1)
	future := t0.Add(time.Hour)
	forged.Claim.Acquired, forged.Claim.Updated = &future, future
	self := node("n", Entering, "b", 5, 3, 1)
	for _, later := range []time.Duration{0, 2 * time.Hour, 1000 * time.Hour} {
		now := t0.Add(later)
		// Judged against the server's clock of the moment it is read: an
		// hour ahead now, so not believed.
		p := Plausible(forged, t0, 5*time.Minute)
		alarms := Alarms([]Participant{p}, now, time.Hour, 10*time.Minute)
		if len(alarms) != 1 || !alarms[0].Unreadable || !strings.Contains(alarms[0].What, "not believed") {
			t.Errorf("+%s: alarms %+v, want one unreadable", later, alarms)
		}
		if v := Verify(self, limits(3, 1), []Participant{self, p}, now, time.Minute); v.Decision != StepBack {
			t.Errorf("+%s with a TTL of a minute: %v (%s), want step back", later, v.Decision, v.Reason)
		}
	}
	// Without the rule, the same claim would be counted out by nobody but
	// would never alarm either: its age is negative.
	if alarms := Alarms([]Participant{forged}, t0, time.Hour, 10*time.Minute); len(alarms) != 0 {
		t.Errorf("the raw forged claim alarms: %+v (the test no longer shows what the rule adds)", alarms)
	}
}
