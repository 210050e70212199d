package lock

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/queue"
)

// The protocol itself is tested on a real API server in
// test/cluster/locktest; these are its pure helpers.

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
			if err != nil || v == nil {
				t.Fatalf("verify: %v, %v", v, err)
			}
			want := map[claim.Decision]queue.EnterMove{claim.Commit: queue.EnterCommit, claim.StepBack: queue.EnterStepBack}[tc.want]
			if a := queue.NewEntrant("me").Verified(*v); a.Move != want {
				t.Errorf("verify: %v (%s), want %v", a.Move, a.Reason, want)
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
			snap, err := l.frontSnapshot(ctx)
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

// waitingNode is a node with a waiting claim as a daemon writes it: the
// digest and place labels, and role's front label.
func waitingNode(t *testing.T, name, zone string, c claim.Claim, role queue.Role) *corev1.Node {
	t.Helper()
	c.State = claim.Waiting
	n := claimedNode(t, name, zone, c)
	n.Labels[claim.LimitsLabel], n.Labels[claim.SinceLabel] = claim.LimitsDigest(c.Limits), claim.SinceValue(c.Since)
	if role != queue.RoleBehind {
		n.Labels[queue.FrontLabel] = string(role)
	}
	return n
}

// TestFindAhead: a node behind the front, its reads done by the lock
// (readAhead, a label selector the API server serves: the fake evaluates
// it as one does) and decided by its queue.Follower, follows the nearest
// live member of its class ahead of it: not a member of another zone or
// of other limits, not one behind it, not one read NotReady; it reads
// wider spans back until one holds a member. At the resync, it enters the
// front if that one has no front label and no live member of the class
// ahead of it has one (a read of the class's front).
func TestFindAhead(t *testing.T) {
	server := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	own := claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: config.ZoneLabel, Max: 1}}}
	at := func(d time.Duration) claim.Claim {
		return claim.Claim{Since: server.Add(d), Updated: server.Add(d), Limits: own}
	}
	me := waitingNode(t, "me", "zone-a", at(0), queue.RoleBehind)
	tests := []struct {
		name     string
		others   []*corev1.Node
		notReady []string
		want     string
		head     bool
	}{
		{"alone", nil, nil, "", false},
		{"the nearest of its class, in the second span", []*corev1.Node{
			waitingNode(t, "a1", "zone-a", at(-time.Second), queue.RoleBehind),
			waitingNode(t, "a2", "zone-a", at(-1500*time.Millisecond), queue.RoleEdge),
			waitingNode(t, "b1", "zone-b", at(-100*time.Millisecond), queue.RoleBehind),
			waitingNode(t, "a3", "zone-a", at(time.Second), queue.RoleBehind),
		}, nil, "a1", false},
		{"far ahead: the widest read, which heads the class", []*corev1.Node{
			waitingNode(t, "a1", "zone-a", at(-time.Hour), queue.RoleBehind),
		}, nil, "a1", true},
		{"other limits are another class", []*corev1.Node{
			waitingNode(t, "x", "zone-a", claim.Claim{Since: server.Add(-time.Second), Updated: server, Limits: claim.Limits{Concurrency: 2}}, queue.RoleBehind),
		}, nil, "", false},
		{"a member read NotReady is passed over", []*corev1.Node{
			waitingNode(t, "a1", "zone-a", at(-time.Minute), queue.RoleBehind),
			waitingNode(t, "a2", "zone-a", at(-time.Second), queue.RoleBehind),
		}, []string{"a2"}, "a1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []runtime.Object{me}
			for _, n := range tt.others {
				if slices.Contains(tt.notReady, n.Name) {
					n = n.DeepCopy()
					n.Status.Conditions[0].Status = corev1.ConditionFalse
				}
				objs = append(objs, n)
			}
			client := fake.NewClientset(objs...)
			l := New(Options{
				Client: client,
				Node:   "me", Limits: own, ClockTolerance: 5 * time.Minute,
				Now: func() time.Time { return server }, ServerNow: func() time.Time { return server },
			})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			// run does the Follower's reads until it asks for something else.
			run := func(f *queue.Follower, a queue.FollowAction) queue.FollowAction {
				for a.Kind == queue.ReadAhead || a.Kind == queue.ReadFront {
					read, err := l.readAhead(ctx, a.Of, a.Span)
					if a.Kind == queue.ReadFront {
						read, err = l.readClass(ctx, queue.ClassOf(a.Of).Selector()+","+queue.FrontLabel)
					}
					if err != nil {
						t.Fatal(err)
					}
					a = f.Step(queue.FollowEvent{Kind: queue.Found, Now: server, Read: read})
				}
				return a
			}
			f := queue.NewFollower(l.self(), time.Time{}, func(d time.Duration) time.Duration { return d })
			got, head := "", false
			if a := run(f, f.Start()); a.Kind == queue.WatchPred {
				got = a.Pred
				f.Step(queue.FollowEvent{Kind: queue.Woke, Now: a.Wake})
				a = run(f, f.Step(queue.FollowEvent{Kind: queue.Rechecked, Now: a.Wake, Self: l.self()}))
				head = a.Kind == queue.EnterFront
			}
			if got != tt.want || head != tt.head {
				t.Errorf("predecessor %q, head %v; want %q, head %v", got, head, tt.want, tt.head)
			}
		})
	}
}

// TestStoppedPassedOver: a waiting claim whose daemon marked it stopped
// is taken as NotReady (passed over, as a NotReady node is, at once), by
// the nodes' locks and by status (Participants); an active claim with the
// mark keeps its slot, and the node's own lock never passes itself over.
func TestStoppedPassedOver(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	at := claim.Claim{Since: now.Add(-time.Minute), Updated: now.Add(-time.Minute), Limits: claim.Limits{Concurrency: 1}}
	mark := func(n *corev1.Node) *corev1.Node { n.Labels[queue.StoppedLabel] = "true"; return n }
	holding := at
	holding.State, holding.Phase, holding.BootID = claim.Holding, claim.PhaseAcquired, "b1"
	acquired := now.Add(-time.Minute)
	holding.Acquired = &acquired
	nodes := []*corev1.Node{
		mark(waitingNode(t, "stopped", "zone-a", at, queue.RoleIn)),
		waitingNode(t, "running", "zone-a", at, queue.RoleIn),
		mark(claimedNode(t, "holding", "zone-a", holding)),
		mark(waitingNode(t, "me", "zone-a", at, queue.RoleIn)),
	}
	want := map[string]bool{"stopped": false, "running": true, "holding": true, "me": true}
	ready := func(ps []claim.Participant) map[string]bool {
		got := map[string]bool{}
		for _, p := range ps {
			got[p.Name] = p.Ready
		}
		return got
	}
	l := New(Options{Client: fake.NewClientset(), Node: "me", Limits: at.Limits, Now: func() time.Time { return now }, ServerNow: func() time.Time { return now }})
	var parse queue.Reader
	if got := ready(l.front.Readiness(parse.Parse(nodes))); !maps.Equal(got, want) {
		t.Errorf("the lock of me reads Ready %v; want %v", got, want)
	}
	want["me"] = false // another node's view, or status
	if got := ready(queue.Participants(nodes, now, time.Minute)); !maps.Equal(got, want) {
		t.Errorf("Participants reads Ready %v; want %v", got, want)
	}
}
