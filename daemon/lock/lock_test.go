package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
)

// The protocol itself is tested on a real API server in
// test/cluster/locktest; these are its pure helpers.

func TestPublishedIsTheStricter(t *testing.T) {
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
		{"restarted with other rules, too many together: one slot", claim.Limits{Concurrency: 4, Groups: rules("new", 9)}, claim.Limits{Concurrency: 3, Groups: rules("old", 9)},
			claim.Limits{Concurrency: 1, Groups: rules("new", 9)}},
		{"restarted with other rules, at the bound", claim.Limits{Concurrency: 4, Groups: rules("new", 8)}, claim.Limits{Concurrency: 3, Groups: rules("old", 8)},
			claim.Limits{Concurrency: 3, Groups: append(rules("new", 8), rules("old", 8)...)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(Options{Limits: tt.own})
			got := l.published(tt.prev)
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

// TestWindow: the nodes that watch are the next round and windowSpare
// more, never fewer than minWindow: a larger concurrency adds its own
// round, not twice it (every watching node receives every change of an
// active claim).
func TestWindow(t *testing.T) {
	for _, tc := range []struct{ concurrency, want int }{
		{0, minWindow}, {1, minWindow}, {5, minWindow}, {10, minWindow},
		{11, 17}, {20, 26}, {100, 106},
	} {
		l := New(Options{Limits: claim.Limits{Concurrency: tc.concurrency}})
		if got := l.window(); got != tc.want {
			t.Errorf("concurrency %d: window %d, want %d", tc.concurrency, got, tc.want)
		}
	}
}

// TestFarPace: a node far back reads the queue a few times per wait,
// whatever the length of the queue: first doubling from 2 s, then about
// half the expected time to reach the window at the rate observed.
func TestFarPace(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		reads []struct {
			at    time.Duration
			ahead int
		}
		want []time.Duration
	}{
		{"unknown rate doubles", []struct {
			at    time.Duration
			ahead int
		}{{0, 40}, {2 * time.Second, 40}, {6 * time.Second, 40}}, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}},
		{"a quarter of the expected wait at the observed rate", []struct {
			at    time.Duration
			ahead int
		}{{0, 100}, {20 * time.Second, 90}}, []time.Duration{2 * time.Second, 45 * time.Second}},
		{"the fastest rate seen counts", []struct {
			at    time.Duration
			ahead int
		}{{0, 100}, {100 * time.Second, 90}, {190 * time.Second, 80}, {200 * time.Second, 70}}, []time.Duration{2 * time.Second, 225 * time.Second, 180 * time.Second, 17500 * time.Millisecond}},
		{"unknown rate doubles up to a minute", []struct {
			at    time.Duration
			ahead int
		}{{0, 40}, {2 * time.Second, 40}, {6 * time.Second, 40}, {14 * time.Second, 40}, {30 * time.Second, 40}, {62 * time.Second, 40}, {122 * time.Second, 40}}, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}},
		{"at most 30 minutes", []struct {
			at    time.Duration
			ahead int
		}{{0, 500}, {5 * time.Hour, 499}}, []time.Duration{2 * time.Second, 30 * time.Minute}},
		{"at least a second", []struct {
			at    time.Duration
			ahead int
		}{{0, 10}, {time.Second, 1}}, []time.Duration{2 * time.Second, time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f farPace
			for i, r := range tc.reads {
				if got := f.next(r.ahead, t0.Add(r.at)); got != tc.want[i] {
					t.Errorf("read %d (+%s, %d ahead): wait %s, want %s", i, r.at, r.ahead, got, tc.want[i])
				}
			}
		})
	}
}

// TestFarPaceReadsPerWait: over a whole wait at a steady rate, the number
// of reads hardly depends on how far back the node starts.
func TestFarPaceReadsPerWait(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	perPosition := 30 * time.Second // one node of the queue goes every 30 s
	reads := func(start int) int {
		var f farPace
		now, n := t0, 0
		for {
			ahead := start - int(now.Sub(t0)/perPosition)
			if ahead <= 0 {
				return n
			}
			n++
			now = now.Add(f.next(ahead, now))
		}
	}
	for _, start := range []int{10, 100, 1000} {
		t.Logf("%4d positions to go: %d reads", start, reads(start))
	}
	if r10, r1000 := reads(10), reads(1000); r1000 > 3*r10+10 {
		t.Errorf("%d reads from 1000 positions back against %d from 10: not far from linear in the wait", r1000, r10)
	}
}

func TestMarkLeft(t *testing.T) {
	since := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	mark := participantMark{name: "n1", since: since}
	ann := func(c claim.Claim) string {
		s, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	limits := claim.Limits{Concurrency: 1}
	for _, tc := range []struct {
		name              string
		label, annotation string
		want              bool
	}{
		{"still waiting in its place", "waiting", ann(claim.Claim{Since: since, Limits: limits}), false},
		{"announced", "entering", ann(claim.Claim{Since: since, Limits: limits}), true},
		{"holding", "holding", ann(claim.Claim{Since: since, Limits: limits}), true},
		{"left and came back", "waiting", ann(claim.Claim{Since: since.Add(time.Minute), Limits: limits}), true},
		{"no claim", "", "", true},
		{"unreadable", "waiting", "{", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &metav1.ObjectMeta{Name: "n1", Labels: map[string]string{}, Annotations: map[string]string{}}
			if tc.label != "" {
				n.Labels[claim.Label] = tc.label
				n.Annotations[claim.Annotation] = tc.annotation
			}
			if got := markLeft(n, mark); got != tc.want {
				t.Errorf("markLeft = %v, want %v", got, tc.want)
			}
		})
	}
}

// alarmRecorder is an AlarmReporter that remembers what it was told.
type alarmRecorder struct {
	raised  []claim.Alarm
	current []claim.Alarm
}

func (r *alarmRecorder) Raise(_ context.Context, a claim.Alarm) { r.raised = append(r.raised, a) }
func (r *alarmRecorder) Current(as []claim.Alarm)               { r.current = as }

func claimedNode(t *testing.T, name, zone string, c claim.Claim) *corev1.Node {
	t.Helper()
	ann, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Labels:      map[string]string{config.ZoneLabel: zone, claim.Label: string(c.State)},
			Annotations: map[string]string{claim.Annotation: ann}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// TestForgedFutureHolder: another node's holding claim acquired an hour
// ahead of the API server's clock is not believed: the lock raises the
// unreadable-claim alarm at once, counts it as holding with concurrency 1
// (this node steps back although its zone has room), and no TTL counts it
// out, however old this host's clock makes it look. The node's own claim,
// with a time ahead too (this host's clock is wrong), is not distrusted
// by the node itself. A believable claim as old is counted out by the TTL.
func TestForgedFutureHolder(t *testing.T) {
	server := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	own := claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: config.ZoneLabel, Max: 1}}}
	for _, tc := range []struct {
		name     string
		acquired time.Time // the other holder's
		host     time.Time // this host's clock
		want     claim.Decision
		alarm    bool
	}{
		{"forged an hour ahead", server.Add(time.Hour), server, claim.StepBack, true},
		{"forged, this host's clock far ahead: the TTL still does not count it out", server.Add(time.Hour), server.Add(1000 * time.Hour), claim.StepBack, true},
		{"forged just within the tolerance: believed, and held", server.Add(4 * time.Minute), server, claim.Commit, false},
		{"an honest holder older than the TTL is counted out", server.Add(-2 * time.Hour), server, claim.Commit, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acquired := tc.acquired
			other := claimedNode(t, "forger", "zone-a", claim.Claim{State: claim.Holding, Since: server.Add(-10 * time.Minute),
				Updated: acquired, Acquired: &acquired, Limits: claim.Limits{Concurrency: 3}, Groups: map[string]string{config.ZoneLabel: "zone-a"},
				BootID: "b", Phase: claim.PhaseRebooting})
			mine := claimedNode(t, "me", "zone-b", claim.Claim{State: claim.Entering, Since: server.Add(time.Hour),
				Updated: tc.host, Limits: own, Groups: map[string]string{config.ZoneLabel: "zone-b"}})
			rec := &alarmRecorder{}
			l := New(Options{
				Client: fake.NewClientset(other, mine), Node: "me", Limits: own,
				TTL: time.Minute, AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute,
				ClockTolerance: 5 * time.Minute,
				Now:            func() time.Time { return tc.host },
				ServerNow:      func() time.Time { return server },
				Alarms:         rec,
			})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			v, err := l.verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v.Decision != tc.want {
				t.Errorf("verify: %v (%s), want %v", v.Decision, v.Reason, tc.want)
			}
			var unreadable []claim.Alarm
			for _, a := range rec.raised {
				if a.Unreadable {
					unreadable = append(unreadable, a)
				}
			}
			if tc.alarm != (len(unreadable) == 1) || len(unreadable) > 1 {
				t.Fatalf("unreadable alarms %+v, want one: %v", unreadable, tc.alarm)
			}
			if tc.alarm {
				a := unreadable[0]
				if a.Node != "forger" || a.State != claim.Holding || !strings.Contains(a.What, "acquired is 1h0m0s ahead of the API server's clock") ||
					!strings.Contains(a.What, "counts as holding") {
					t.Errorf("alarm %+v", a)
				}
			}
			snap, _, err := l.snapshot(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range snap {
				if p.Name == "me" && p.Err != nil {
					t.Errorf("the node distrusts its own claim: %v", p.Err)
				}
				if p.Name == "forger" && (p.Err != nil) != tc.alarm {
					t.Errorf("the other claim in the snapshot: err %v, want unreadable %v", p.Err, tc.alarm)
				}
			}
		})
	}
}

// TestClockToleranceDefault: a lock not given the tolerance derives it
// from its alarm ages and TTL as the configuration does.
func TestClockToleranceDefault(t *testing.T) {
	l := New(Options{AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute})
	want, _ := config.Default().Lock.ClockTolerance()
	if l.o.ClockTolerance != want || want != 5*time.Minute {
		t.Errorf("tolerance %s, want %s (5m)", l.o.ClockTolerance, want)
	}
	if l := New(Options{AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute, TTL: 4 * time.Minute}); l.o.ClockTolerance != 2*time.Minute {
		t.Errorf("with a TTL of 4m: tolerance %s, want 2m", l.o.ClockTolerance)
	}
}

// TestFarBackStaleView: a node far back sees room for it from the active
// claims and its last read of the queue. Nodes that took a slot and lost
// it within one poll (an admin removed their claims, and they joined
// again, behind) were never seen active; and an admin removed a claim
// that was not believed (it bound everyone to concurrency 1). In both
// cases the slot is free to this node at the first read of the active
// claims (CI's seeds 130, and 700, 703, 997: a slot idle 41 to 48 s): the
// waiting nodes of the last read do not count, and the claim not believed
// is read again.
func TestFarBackStaleView(t *testing.T) {
	server := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	own := claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: config.ZoneLabel, Max: 1}}}
	waiting := func(name, zone string, since time.Duration) *corev1.Node {
		return claimedNode(t, name, zone, claim.Claim{State: claim.Waiting, Since: server.Add(since), Updated: server.Add(since), Limits: own})
	}
	acquired := server.Add(-time.Minute)
	holder := claimedNode(t, "holder", "zone-a", claim.Claim{State: claim.Holding, Since: server.Add(-time.Hour), Updated: acquired,
		Acquired: &acquired, Limits: own, Groups: map[string]string{config.ZoneLabel: "zone-a"}, BootID: "b", Phase: claim.PhaseRebooting})
	// Updated an hour ahead: not believed.
	forged := claimedNode(t, "forged", "zone-c", claim.Claim{State: claim.Waiting, Since: server.Add(-50 * time.Minute), Updated: server.Add(time.Hour), Limits: own})
	for _, tc := range []struct {
		name string
		// last is the last read of the queue; now, the Nodes as they are.
		last, now []*corev1.Node
	}{
		{"two nodes ahead joined again behind",
			[]*corev1.Node{holder, waiting("b1", "zone-b", -40*time.Minute), waiting("b2", "zone-b", -39*time.Minute), waiting("me", "zone-b", -30*time.Minute)},
			[]*corev1.Node{holder, waiting("b1", "zone-b", -1*time.Minute), waiting("b2", "zone-b", -1*time.Minute), waiting("me", "zone-b", -30*time.Minute)}},
		{"a claim not believed was removed",
			[]*corev1.Node{holder, forged, waiting("me", "zone-b", -30*time.Minute)},
			[]*corev1.Node{holder, claimedNode(t, "forged", "zone-c", claim.Claim{}), waiting("me", "zone-b", -30*time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := make([]runtime.Object, 0, len(tc.now))
			for _, n := range tc.now {
				n = n.DeepCopy()
				if n.Labels[claim.Label] == "" {
					delete(n.Labels, claim.Label)
					delete(n.Annotations, claim.Annotation)
				}
				objs = append(objs, n)
			}
			l := New(Options{
				Client: fake.NewClientset(objs...), Node: "me", Limits: own, ClockTolerance: 5 * time.Minute,
				Now: func() time.Time { return server }, ServerNow: func() time.Time { return server },
			})
			last := l.distrust(Participants(tc.last, server, 5*time.Minute))
			if q := claim.EligibilityUpTo(last, server, 0, l.silent(server), "me"); q.Eligible("me") {
				t.Fatal("eligible in the last read already: the test proves nothing")
			}
			if !l.roomNow(context.Background(), newQueueView(last, server)) {
				t.Errorf("no room seen at the first read of the active claims")
			}
		})
	}
}

// TestNearestAhead: the waiting claims of a partial read, in queue order,
// without this node's own, the active ones and those that cannot be read.
func TestNearestAhead(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	p := func(name string, state claim.State, since time.Duration, err error) claim.Participant {
		return claim.Participant{Name: name, Ready: true, Err: err, Claim: claim.Claim{State: state, Since: t0.Add(since)}}
	}
	snap := []claim.Participant{
		p("c", claim.Waiting, 2*time.Second, nil),
		p("me", claim.Waiting, 3*time.Second, nil),
		p("a", claim.Waiting, time.Second, nil),
		p("held", claim.Holding, 0, nil),
		p("broken", claim.Waiting, time.Second, errors.New("cannot be read")),
		p("b", claim.Waiting, time.Second, nil),
	}
	if got, want := nearestAhead(snap, "me"), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("nearestAhead = %v, want %v", got, want)
	}
}

// TestStatusChanged: a change of the status is signalled once until
// taken, and a status set again unchanged is not, so the cycle shows the
// operator a change as it happens and is not woken for nothing.
func TestStatusChanged(t *testing.T) {
	l := New(Options{})
	pending := func() bool {
		select {
		case <-l.StatusChanged():
			return true
		default:
			return false
		}
	}
	waiting := Status{State: claim.Waiting, Position: 2, Reason: "2 ahead"}
	steps := []struct {
		set  Status
		want bool
	}{
		{Status{Position: -1}, false}, // what New starts with
		{waiting, true},
		{waiting, false},
		{Status{State: claim.Waiting, Position: 1, Reason: "1 ahead"}, true},
		{Status{State: claim.Entering, Position: -1, Reason: "verifying"}, true},
	}
	for i, s := range steps {
		l.setStatus(s.set)
		if got := pending(); got != s.want {
			t.Errorf("step %d (%+v): signalled %v, want %v", i, s.set, got, s.want)
		}
	}
	// Two changes before the cycle looks make one signal: it reads the
	// latest status, once.
	l.setStatus(waiting)
	l.setStatus(Status{Position: -1})
	if !pending() || pending() {
		t.Error("two changes before a look: want exactly one signal")
	}
}

// TestExcludeSelector: the terms leave out the full groups' nodes, in a
// fixed order, and pass over what a selector cannot name (a claim written
// by another hand may publish any label or value): the read is then
// larger, never refused.
func TestExcludeSelector(t *testing.T) {
	zone := "topology.kubernetes.io/zone"
	tests := []struct {
		name string
		full map[string][]string
		want string
	}{
		{"none full", nil, ""},
		{"one zone", map[string][]string{zone: {"a"}}, "," + zone + " notin (a)"},
		{"two labels, sorted", map[string][]string{zone: {"a", "b"}, "rack": {"r1"}}, ",rack notin (r1)," + zone + " notin (a,b)"},
		{"a value no selector can name", map[string][]string{zone: {"a b", "", "c"}}, "," + zone + " notin (c)"},
		{"only such values", map[string][]string{zone: {"a,b)"}}, ""},
		{"a label no selector can name", map[string][]string{"bad label": {"a"}, zone: {"a"}}, "," + zone + " notin (a)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := excludeSelector(tt.full)
			if got != tt.want {
				t.Fatalf("excludeSelector(%v) = %q, want %q", tt.full, got, tt.want)
			}
			if _, err := labels.Parse(claim.AheadSelector(time.Unix(1, 0)) + got); err != nil {
				t.Fatalf("the selector does not parse: %v", err)
			}
		})
	}
}
