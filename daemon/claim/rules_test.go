package claim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

const zoneLabel = "topology.kubernetes.io/zone"

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// node builds a participant: state, zone ("" for no label), since offset
// in seconds, published concurrency, published zone max (0: no rule).
func node(name string, state State, zone string, since int, conc, zoneMax int) Participant {
	p := Participant{Name: name, Ready: true, Labels: map[string]string{}}
	if zone != "" {
		p.Labels[zoneLabel] = zone
	}
	p.Claim = Claim{V: 1, State: state, Since: t0.Add(time.Duration(since) * time.Second), Updated: t0,
		Limits: Limits{Concurrency: conc}}
	if zoneMax > 0 {
		p.Claim.Limits.Groups = []GroupLimit{{zoneLabel, zoneMax}}
		if zone != "" && state.Active() {
			p.Claim.Groups = map[string]string{zoneLabel: zone}
		}
	}
	return p
}

func limits(conc, zoneMax int) Limits {
	l := Limits{Concurrency: conc}
	if zoneMax > 0 {
		l.Groups = []GroupLimit{{zoneLabel, zoneMax}}
	}
	return l
}

func TestVerify(t *testing.T) {
	acquired := t0.Add(-2 * time.Hour)
	expired := node("old", Holding, "a", -100, 2, 1)
	expired.Claim.Acquired = &acquired
	unreadable := node("broken", Holding, "", 0, 1, 0)
	unreadable.Err = ErrUnparsable
	relabelled := node("moved", Holding, "b", -5, 3, 1)
	relabelled.Claim.Groups = map[string]string{zoneLabel: "a"} // announced in zone a, now labelled b

	tests := []struct {
		name   string
		self   Participant
		own    Limits
		others []Participant
		ttl    time.Duration
		want   Decision
		reason string
	}{
		{"alone", node("n", Entering, "a", 0, 1, 1), limits(1, 1), nil, 0, Commit, ""},
		{"cluster full", node("n", Entering, "a", 0, 1, 1), limits(1, 1),
			[]Participant{node("h", Holding, "b", -5, 1, 1)}, 0, StepBack, "the cluster is full: 1 of 1 taken (h)"},
		{"room in another zone", node("n", Entering, "a", 0, 2, 1), limits(2, 1),
			[]Participant{node("h", Holding, "b", -5, 2, 1)}, 0, Commit, ""},
		{"zone full", node("n", Entering, "a", 0, 2, 1), limits(2, 1),
			[]Participant{node("h", Holding, "a", -5, 2, 1)}, 0, StepBack, zoneLabel + "=a is full: 1 of 1 taken (h)"},
		{"waiting claims take nothing", node("n", Entering, "a", 5, 1, 1), limits(1, 1),
			[]Participant{node("w", Waiting, "a", 0, 1, 1)}, 0, Commit, ""},
		{"a waiting node's stricter limit binds too", node("n", Entering, "a", 5, 2, 0), limits(2, 0),
			[]Participant{node("h", Holding, "b", 0, 2, 0), node("w", Waiting, "c", 0, 1, 0)}, 0, StepBack, "the cluster is full: 1 of 1 taken (h)"},
		{"a waiting node's group limit binds in its own group only", node("n", Entering, "a", 5, 3, 2), limits(3, 2),
			[]Participant{node("h", Holding, "a", 0, 3, 2), node("w", Waiting, "b", 0, 3, 1)}, 0, Commit, ""},
		{"entering ahead", node("n", Entering, "a", 5, 1, 1), limits(1, 1),
			[]Participant{node("e", Entering, "b", 0, 1, 1)}, 0, StepBack, "the cluster is full"},
		{"entering behind", node("n", Entering, "a", 0, 1, 1), limits(1, 1),
			[]Participant{node("e", Entering, "b", 5, 1, 1)}, 0, Stay, "will step back"},
		{"same since: the name decides", node("b", Entering, "a", 0, 1, 1), limits(1, 1),
			[]Participant{node("a", Entering, "b", 0, 1, 1)}, 0, StepBack, ""},
		{"stricter published limit of a holder", node("n", Entering, "a", 0, 3, 0), limits(3, 0),
			[]Participant{node("h", Holding, "b", -5, 1, 0)}, 0, StepBack, "1 of 1"},
		{"own config stricter than published", node("n", Entering, "a", 0, 3, 0), limits(1, 0),
			[]Participant{node("h", Holding, "b", -5, 3, 0)}, 0, StepBack, "1 of 1"},
		{"group rule published only by a holder", node("n", Entering, "a", 0, 3, 0), limits(3, 0),
			[]Participant{node("h", Holding, "a", -5, 3, 1)}, 0, StepBack, zoneLabel + "=a"},
		{"no zone label: not limited by the zone rule", node("n", Entering, "", 0, 2, 1), limits(2, 1),
			[]Participant{node("h", Holding, "a", -5, 2, 1)}, 0, Commit, ""},
		{"holder without zone label does not fill a zone", node("n", Entering, "a", 0, 2, 1), limits(2, 1),
			[]Participant{node("h", Holding, "", -5, 2, 1)}, 0, Commit, ""},
		{"unreadable claim holds a slot", node("n", Entering, "a", 0, 2, 0), limits(2, 0),
			[]Participant{unreadable}, 0, StepBack, "1 of 1 taken (broken)"},
		{"old holder keeps its place", node("n", Entering, "a", 0, 2, 1), limits(2, 1),
			[]Participant{expired}, 0, StepBack, zoneLabel + "=a"},
		{"old holder counted out with a TTL", node("n", Entering, "a", 0, 2, 1), limits(2, 1),
			[]Participant{expired}, time.Hour, Commit, ""},
		{"relabelled holder counts in its recorded zone", node("n", Entering, "a", 0, 3, 1), limits(3, 1),
			[]Participant{relabelled}, 0, StepBack, zoneLabel + "=a"},
		{"relabelled holder counts in its new zone too", node("n", Entering, "b", 0, 3, 1), limits(3, 1),
			[]Participant{relabelled}, 0, StepBack, zoneLabel + "=b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := append([]Participant{tt.self}, tt.others...)
			v := Verify(tt.self, tt.own, snap, t0, tt.ttl)
			if v.Decision != tt.want || !strings.Contains(v.Reason, tt.reason) {
				t.Errorf("got %v (%s), want %v (%s)", v.Decision, v.Reason, tt.want, tt.reason)
			}
		})
	}
}

func TestEligibility(t *testing.T) {
	notReady := node("w0", Waiting, "a", 0, 1, 0)
	notReady.Ready = false
	unreadable := node("w0", Waiting, "a", 0, 1, 0)
	unreadable.Err = ErrUnparsable

	eight := make([]Participant, 8)
	for i := range eight {
		eight[i] = node(fmt.Sprintf("vmss%06d", 7-i), Waiting, "", 0, 2, 0) // same second: names decide
	}
	tests := []struct {
		name     string
		snap     []Participant
		skip     []string
		admitted []string
		blocked  []string
		skipped  []string
	}{
		{"the seed's eight at once, concurrency 2", eight, nil,
			[]string{"vmss000000", "vmss000001"}, []string{"vmss000002", "vmss000003", "vmss000004", "vmss000005", "vmss000006", "vmss000007"}, nil},
		{"holders first, then the queue", []Participant{
			node("w1", Waiting, "b", 1, 2, 0), node("h", Holding, "a", 5, 2, 0), node("w2", Waiting, "c", 2, 2, 0)}, nil,
			[]string{"h", "w1"}, []string{"w2"}, nil},
		{"a full zone is skipped over", []Participant{
			node("h", Holding, "a", 0, 3, 1), node("a2", Waiting, "a", 1, 3, 1), node("b1", Waiting, "b", 2, 3, 1), node("c1", Waiting, "c", 3, 3, 1)}, nil,
			[]string{"h", "b1", "c1"}, []string{"a2"}, nil},
		{"a waiting node's own stricter limit keeps it out", []Participant{
			node("h", Holding, "a", 0, 3, 0), node("w", Waiting, "b", 1, 1, 0)}, nil,
			[]string{"h"}, []string{"w"}, nil},
		{"a NotReady head is passed over at once", []Participant{notReady, node("w1", Waiting, "b", 1, 1, 0)}, nil,
			[]string{"w1"}, nil, []string{"w0"}},
		{"a silent head is passed over after the grace", []Participant{node("w0", Waiting, "a", 0, 1, 0), node("w1", Waiting, "b", 1, 1, 0)}, []string{"w0"},
			[]string{"w1"}, nil, []string{"w0"}},
		{"an unreadable waiting claim is ignored", []Participant{unreadable, node("w1", Waiting, "b", 1, 1, 0)}, nil,
			[]string{"w1"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := Eligibility(tt.snap, t0, 0, func(n string) bool { return slices.Contains(tt.skip, n) })
			if !slices.Equal(q.Admitted, tt.admitted) {
				t.Errorf("admitted %v, want %v", q.Admitted, tt.admitted)
			}
			var blocked, skipped []string
			for n := range q.Blocked {
				blocked = append(blocked, n)
			}
			for n := range q.Skipped {
				skipped = append(skipped, n)
			}
			slices.Sort(blocked)
			slices.Sort(skipped)
			if !slices.Equal(blocked, tt.blocked) || !slices.Equal(skipped, tt.skipped) {
				t.Errorf("blocked %v skipped %v, want %v and %v", blocked, skipped, tt.blocked, tt.skipped)
			}
		})
	}
	q := Eligibility(eight, t0, 0, nil)
	if q.Position("vmss000003") != 3 || !q.Eligible("vmss000001") || q.Eligible("vmss000002") {
		t.Errorf("position %d, eligible %v %v", q.Position("vmss000003"), q.Eligible("vmss000001"), q.Eligible("vmss000002"))
	}
}

func TestAlarms(t *testing.T) {
	acquired := t0.Add(-90 * time.Minute)
	old := node("old", Holding, "a", 0, 1, 0)
	old.Claim.Acquired = &acquired
	fresh := node("fresh", Holding, "b", 0, 1, 0)
	now := t0.Add(time.Minute)
	fresh.Claim.Acquired = &now
	stuck := node("stuck", Entering, "c", 0, 1, 0) // updated at t0
	broken := node("broken", Holding, "", 0, 1, 0)
	broken.Err = ErrUnparsable
	brokenWaiting := node("broken-w", Waiting, "", 0, 1, 0)
	brokenWaiting.Err = ErrUnparsable
	got := Alarms([]Participant{old, fresh, stuck, broken, brokenWaiting, node("w", Waiting, "", 0, 1, 0)}, t0.Add(20*time.Minute), time.Hour, 10*time.Minute)
	var summary []string
	for _, a := range got {
		summary = append(summary, fmt.Sprintf("%s:%s:%s", a.Node, a.State, a.Age))
	}
	want := []string{"broken:holding:0s", "broken-w:waiting:0s", "old:holding:1h50m0s", "stuck:entering:20m0s"}
	if !slices.Equal(summary, want) {
		t.Errorf("alarms %v, want %v", summary, want)
	}
	for _, a := range got {
		if a.What == "" {
			t.Errorf("alarm for %s says nothing", a.Node)
		}
		// An unreadable claim counts as holding unless it says waiting.
		if holds := strings.Contains(a.What, "counts as holding"); a.Unreadable && holds != (a.State != Waiting) {
			t.Errorf("alarm for %s (%s): %q", a.Node, a.State, a.What)
		}
	}
}

func TestYield(t *testing.T) {
	tests := []struct {
		name   string
		self   Participant
		others []Participant
		yield  bool
	}{
		{"nobody ahead", node("n", Entering, "a", 5, 1, 0), []Participant{node("w", Waiting, "b", 9, 1, 0)}, false},
		{"a waiting node ahead takes the one free slot", node("n", Entering, "a", 5, 1, 0), []Participant{node("w", Waiting, "b", 1, 1, 0)}, true},
		{"room for both", node("n", Entering, "a", 5, 2, 0), []Participant{node("w", Waiting, "b", 1, 2, 0)}, false},
		{"entering behind yields to us, not we to it", node("n", Entering, "a", 1, 1, 0), []Participant{node("e", Entering, "b", 5, 1, 0)}, false},
		{"waiting ahead in a full zone does not hold us up", node("n", Entering, "b", 5, 2, 1), []Participant{
			node("h", Holding, "a", 0, 2, 1), node("w", Waiting, "a", 1, 2, 1)}, false},
		// L1: W waits first and publishes concurrency 1; E announced
		// behind n and its machine is dead. n must not give way to W,
		// which cannot go while E is there: it did, forever.
		{"a waiting node ahead that cannot go now is not given way to", node("n", Entering, "a", 5, 2, 0), []Participant{
			node("w", Waiting, "b", 1, 1, 0), node("e", Entering, "c", 9, 2, 0)}, false},
		{"a NotReady waiting node ahead is passed over", node("n", Entering, "a", 5, 1, 0), []Participant{func() Participant {
			p := node("w", Waiting, "b", 1, 1, 0)
			p.Ready = false
			return p
		}()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := Yield(tt.self, append([]Participant{tt.self}, tt.others...), t0, 0, nil)
			if got != tt.yield {
				t.Errorf("yield %v (%s), want %v", got, why, tt.yield)
			}
		})
	}
}

// queueOf50 is the queue of issue 39: 50 waiting claims in zones a, b
// and c, each publishing concurrency 2 and rulesEach group rules, the
// zone at most 1 and the others over labels r1, r2, … that every node
// has; forged > 0 makes the head of the queue publish that many rules
// instead, over labels no other node has, and record a value for each
// when recorded is set.
func queueOf50(rulesEach, forged int, recorded bool) []Participant {
	snap := make([]Participant, 50)
	for i := range snap {
		zone := string(rune('a' + i%3))
		p := node(fmt.Sprintf("n%02d", i), Waiting, zone, i, 2, 1)
		p.Claim.Groups = map[string]string{zoneLabel: zone}
		for r := 1; r < rulesEach; r++ {
			label := fmt.Sprintf("r%d", r)
			p.Labels[label] = zone
			p.Claim.Groups[label] = zone
			p.Claim.Limits.Groups = append(p.Claim.Limits.Groups, GroupLimit{label, 1})
		}
		snap[i] = p
	}
	if forged > 0 {
		head := &snap[0].Claim
		head.Limits.Groups, head.Groups = nil, nil
		for r := range forged {
			label := fmt.Sprintf("f%04d", r)
			head.Limits.Groups = append(head.Limits.Groups, GroupLimit{label, 1})
			if recorded {
				if head.Groups == nil {
					head.Groups = map[string]string{}
				}
				head.Groups[label] = "x"
			}
		}
	}
	return snap
}

// TestForgedRulesUnreadable: the claim of issue 39, 5,000 group rules
// from one node, cannot be read; waiting, it is left out of the queue
// and binds nothing; active, it holds the cluster's only slot; each way
// it is alarmed.
func TestForgedRulesUnreadable(t *testing.T) {
	for _, state := range []State{Waiting, Entering, Holding} {
		t.Run(string(state), func(t *testing.T) {
			snap := queueOf50(1, 5000, true)
			snap[0].Claim.State = state
			ann, err := snap[0].Claim.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if len(ann) > 256<<10 {
				t.Fatalf("an annotation of %d bytes: more than the API server takes", len(ann))
			}
			snap[0].Claim, snap[0].Err = Parse(string(state), ann)
			if !errors.Is(snap[0].Err, ErrUnparsable) || !strings.Contains(snap[0].Err.Error(), "5000 group rules") {
				t.Fatalf("parsed: %v", snap[0].Err)
			}
			q := Eligibility(snap, t0, 0, nil)
			alarms := Alarms(snap, t0, time.Hour, time.Hour)
			if len(alarms) != 1 || alarms[0].Node != "n00" || !alarms[0].Unreadable {
				t.Errorf("alarms %+v, want n00's claim unreadable", alarms)
			}
			switch {
			case state == Waiting && (slices.Contains(q.Waiting, "n00") || !slices.Equal(q.Admitted, []string{"n01", "n02"})):
				t.Errorf("waiting %v, admitted %v: want n00 left out and n01, n02 in", q.Waiting, q.Admitted)
			case state.Active() && !slices.Equal(q.Admitted, []string{"n00"}):
				t.Errorf("admitted %v, want n00 alone (concurrency 1)", q.Admitted)
			}
		})
	}
}

// BenchmarkRules evaluates the queue of issue 39 as every node does on
// each change it sees: 50 waiting claims, the head publishing 5,000 group
// rules (built here, as Parse no longer reads such a claim), with or
// without a value recorded for each; and 50 claims with MaxGroupRules
// rules each, the most a claim that parses has, and with one each (the
// zone's, as most configurations).
func BenchmarkRules(b *testing.B) {
	for _, s := range []struct {
		name string
		snap []Participant
	}{
		{"head-5000-rules", queueOf50(1, 5000, false)},
		{"head-5000-rules-and-values", queueOf50(1, 5000, true)},
		{"all-16-rules", queueOf50(MaxGroupRules, 0, false)},
		{"all-1-rule", queueOf50(1, 0, false)},
	} {
		entering := slices.Clone(s.snap)
		entering[len(entering)-1].Claim.State = Entering
		b.Run(s.name+"/eligibility", func(b *testing.B) {
			for b.Loop() {
				Eligibility(s.snap, t0, 0, nil)
			}
		})
		b.Run(s.name+"/verify", func(b *testing.B) {
			self := entering[len(entering)-1]
			for b.Loop() {
				Verify(self, self.Claim.Limits, entering, t0, 0)
			}
		})
	}
}
