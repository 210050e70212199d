package queue

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

func noJitter(d time.Duration) time.Duration { return d }

// TestLook: one look at the front, one row per outcome: admitted, or
// where the node stands, why it waits, whose readiness it reads and how
// long it waits for a change.
func TestLook(t *testing.T) {
	now := t0.Add(time.Hour)
	holding := func(name, z string) claim.Participant {
		p := node(name, claim.Holding, z, 0, 1, 1)
		acq := now.Add(-time.Minute)
		p.Claim.Acquired, p.Claim.BootID, p.Claim.Groups = &acq, "b", map[string]string{zone: z}
		return p
	}
	waiting := func(name, z string, since int) claim.Participant {
		p := node(name, claim.Waiting, z, since, 1, 1)
		p.Labels[FrontLabel] = string(RoleIn)
		return p
	}
	me := waiting("me", "z1", 100)
	tests := []struct {
		name     string
		view     []claim.Participant
		metadata bool
		stale    bool
		first    map[string]time.Duration // seen eligible this long ago
		admitted bool
		role     Role
		ahead    int
		reason   string
		probe    []string
		wait     time.Duration
	}{
		{"alone: admitted", nil, false, false, nil, true, "", 0, "", nil, 0},
		{"a slot held: in, waiting for it", []claim.Participant{holding("h", "z2")}, false, false, nil,
			false, RoleIn, 0, "the cluster is full: 1 of 1 (h)", nil, 16 * time.Second},
		{"one ahead, let go: the edge, waiting for it", []claim.Participant{waiting("a", "z1", 50)}, false, false, nil,
			false, RoleEdge, 1, "the cluster is full: 1 of 1 (a)", nil, 16 * time.Second},
		{"three ahead: behind the edge", []claim.Participant{waiting("a", "z1", 50), waiting("b", "z1", 60), waiting("c", "z1", 70)},
			false, false, nil, false, RoleBehind, 3, "the cluster is full: 1 of 1 (a)", nil, 16 * time.Second},
		{"a stale watch: look again soon", []claim.Participant{waiting("a", "z1", 50)}, false, true, nil,
			false, RoleEdge, 1, "the cluster is full: 1 of 1 (a)", nil, 2 * time.Second},
		{"metadata, one let go just now: its readiness read when due", []claim.Participant{waiting("a", "z1", 50)}, true, false,
			map[string]time.Duration{"a": 0}, false, RoleEdge, 1, "the cluster is full: 1 of 1 (a)", nil, ReadyProbe},
		{"metadata, one let go a while ago: its readiness read now", []claim.Participant{waiting("a", "z1", 50)}, true, false,
			map[string]time.Duration{"a": 2 * time.Second}, false, RoleEdge, 1, "the cluster is full: 1 of 1 (a)", []string{"a"}, ReadyReprobe},
		{"whole Nodes: no readiness read", []claim.Participant{waiting("a", "z1", 50)}, false, false,
			map[string]time.Duration{"a": 2 * time.Second}, false, RoleEdge, 1, "the cluster is full: 1 of 1 (a)", nil, 16 * time.Second},
		{"one ahead silent past the grace: passed over, admitted", []claim.Participant{waiting("a", "z1", 50)}, false, false,
			map[string]time.Duration{"a": 2 * time.Minute}, true, "", 0, "", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Front{Node: "me", Grace: time.Minute, Metadata: tt.metadata, Jitter: noJitter}
			for name, ago := range tt.first {
				// Seen eligible that long ago: a look then noted it.
				f.noteEligible(claim.Queue{Waiting: []string{name}, Admitted: []string{name}}, now.Add(-ago))
			}
			self := me
			self.Claim.Since = now.Add(-time.Minute) // settled: reports alarms
			look := f.Look(View{Self: self, Snap: append(slices.Clone(tt.view), self), Now: now, Server: now, Stale: tt.stale})
			if look.Admitted != tt.admitted {
				t.Fatalf("admitted = %v, want %v (queue %+v)", look.Admitted, tt.admitted, look.Queue)
			}
			if tt.admitted {
				return
			}
			if look.Role != tt.role || look.Ahead != tt.ahead || !slices.Equal(look.Probe, tt.probe) || look.Wait != tt.wait {
				t.Errorf("role %q ahead %d probe %v wait %v; want %q %d %v %v", look.Role, look.Ahead, look.Probe, look.Wait, tt.role, tt.ahead, tt.probe, tt.wait)
			}
			if tt.reason != "" && look.Reason != tt.reason {
				t.Errorf("reason %q, want %q", look.Reason, tt.reason)
			}
		})
	}
}

// TestSilent: a waiting node eligible for longer than the grace is
// silent; never while the cluster is paused, and after a pause only a
// grace after this node saw it end; never this node itself; and a node
// no longer eligible starts its grace afresh.
func TestSilent(t *testing.T) {
	f := &Front{Node: "me", Grace: time.Minute}
	let := claim.Queue{Waiting: []string{"a", "me"}, Admitted: []string{"a", "me"}}
	f.noteEligible(let, t0)
	steps := []struct {
		do     func()
		at     time.Duration
		silent map[string]bool
	}{
		{func() {}, 30 * time.Second, map[string]bool{"a": false, "me": false}},
		{func() {}, 61 * time.Second, map[string]bool{"a": true, "me": false}},
		{func() { f.SetPaused(true, t0.Add(70*time.Second)) }, 80 * time.Second, map[string]bool{"a": false}},
		{func() { f.SetPaused(false, t0.Add(90*time.Second)) }, 120 * time.Second, map[string]bool{"a": false}},
		{func() {}, 151 * time.Second, map[string]bool{"a": true}},
		{func() { f.noteEligible(claim.Queue{Waiting: []string{"a", "me"}}, t0.Add(152*time.Second)) }, 153 * time.Second, map[string]bool{"a": false}},
		{func() { f.noteEligible(let, t0.Add(160*time.Second)) }, 200 * time.Second, map[string]bool{"a": false}},
		{func() {}, 221 * time.Second, map[string]bool{"a": true}},
	}
	for i, s := range steps {
		s.do()
		silent := f.Silent(t0.Add(s.at))
		for name, want := range s.silent {
			if got := silent(name); got != want {
				t.Errorf("step %d (t0+%v): %s silent = %v, want %v", i, s.at, name, got, want)
			}
		}
	}
}

// TestProbeDue: whose readiness a node in the front reads, and when.
func TestProbeDue(t *testing.T) {
	now := t0
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name     string
		r        readyRead
		known    bool
		eligible bool
		first    time.Time
		want     time.Time
		probe    bool
	}{
		{"never read, not let go", readyRead{}, false, false, time.Time{}, time.Time{}, false},
		{"never read, let go: ReadyProbe after it was", readyRead{}, false, true, ago(time.Second), ago(time.Second).Add(ReadyProbe), true},
		{"eligible but not yet seen so: not read", readyRead{}, false, true, time.Time{}, time.Time{}, false},
		{"read Ready, still let go: ReadyReprobe after that read", readyRead{ready: true, at: ago(time.Second)}, true, true, ago(time.Hour), ago(time.Second).Add(ReadyReprobe), true},
		{"read Ready, no longer let go: not read", readyRead{ready: true, at: ago(time.Second)}, true, false, time.Time{}, time.Time{}, false},
		{"read NotReady: ReadyReprobe after that read, let go or not", readyRead{ready: false, at: ago(2 * time.Second)}, true, false, time.Time{}, ago(2 * time.Second).Add(ReadyReprobe), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, probe := probeDue(tt.r, tt.known, tt.eligible, tt.first)
			if probe != tt.probe || !got.Equal(tt.want) {
				t.Errorf("probeDue = %v, %v; want %v, %v", got, probe, tt.want, tt.probe)
			}
		})
	}
}

// TestReadiness: with the queue read as metadata, a node last read
// NotReady is taken as NotReady until a read shows it Ready; a failed
// read keeps what was known; a stopped waiting claim is NotReady however
// it was read; this node's own claim is never changed.
func TestReadiness(t *testing.T) {
	f := &Front{Node: "me", Metadata: true}
	f.NoteReady("down", false, t0)
	f.NoteReady("up", true, t0)
	f.NoteReady("back", false, t0)
	f.NoteReady("back", true, t0.Add(time.Second))
	f.ReadFailed("down", t0.Add(time.Second))
	f.ReadFailed("unknown", t0.Add(time.Second))
	stopped := node("stopped", claim.Waiting, "z1", 0, 1, 1, StoppedLabel+"=true")
	holdingStopped := node("holder", claim.Holding, "z1", 0, 1, 1, StoppedLabel+"=true")
	meStopped := node("me", claim.Waiting, "z1", 0, 1, 1, StoppedLabel+"=true")
	var ps []claim.Participant
	for _, n := range []string{"down", "up", "back", "unknown"} {
		ps = append(ps, node(n, claim.Waiting, "z1", 0, 1, 1))
	}
	ps = append(ps, stopped, holdingStopped, meStopped)
	want := map[string]bool{"down": false, "up": true, "back": true, "unknown": true, "stopped": false, "holder": true, "me": true}
	for _, p := range f.Readiness(ps) {
		if p.Ready != want[p.Name] {
			t.Errorf("%s Ready = %v, want %v", p.Name, p.Ready, want[p.Name])
		}
	}
	f.Metadata = false // whole Nodes carry their own condition
	if p := f.Readiness([]claim.Participant{node("down", claim.Waiting, "z1", 0, 1, 1)})[0]; !p.Ready {
		t.Error("a whole Node read Ready was taken as NotReady")
	}
}

// TestLookReportsAlarms: a holder stuck for two hours blocks the queue
// (concurrency 1). Every node that looks sees the alarm, but only a node
// with fewer than three waiting claims ahead of it that it does not pass
// over reports it (an Event): the Events' names are random, so every node
// writing one would make one per waiting node. A node that joined less
// than AlarmSettle ago does not report yet (nodes that joined with it may
// not show in the front yet), and looks again when it will.
func TestLookReportsAlarms(t *testing.T) {
	now := t0.Add(3 * time.Hour)
	acquired := now.Add(-2 * time.Hour)
	holder := node("holder", claim.Holding, "z0", 0, 1, 0)
	holder.Claim.Acquired, holder.Claim.Updated, holder.Claim.BootID, holder.Claim.Phase = &acquired, acquired, "b", claim.PhaseRebooting
	for _, tc := range []struct {
		name     string
		ahead    int           // waiting claims ahead of this node
		notReady int           // of which NotReady (passed over)
		joined   time.Duration // this node's claim's age
		report   bool
		wait     time.Duration // 0: the usual
	}{
		{"first in the queue", 0, 0, time.Minute, true, 0},
		{"two ahead", 2, 0, time.Minute, true, 0},
		{"three ahead", 3, 0, time.Minute, false, 0},
		{"three ahead, one NotReady", 3, 1, time.Minute, true, 0},
		{"four ahead, one NotReady", 4, 1, time.Minute, false, 0},
		{"first, joined 2s ago", 0, 0, 2 * time.Second, false, AlarmSettle - 2*time.Second},
		{"first, joined AlarmSettle ago", 0, 0, AlarmSettle, true, 0},
		{"three ahead, joined 2s ago", 3, 0, 2 * time.Second, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := []claim.Participant{holder}
			for i := range tc.ahead {
				p := node(fmt.Sprintf("w%d", i), claim.Waiting, "z1", 0, 1, 0)
				p.Claim.Since = now.Add(time.Duration(i-60) * time.Minute)
				p.Ready = i >= tc.notReady
				snap = append(snap, p)
			}
			me := node("me", claim.Waiting, "z1", 0, 1, 0)
			me.Claim.Since = now.Add(-tc.joined)
			f := &Front{Node: "me", Grace: time.Hour, AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute, Jitter: noJitter}
			look := f.Look(View{Self: me, Snap: append(snap, me), Now: now, Server: now})
			if look.Admitted {
				t.Fatal("admitted; want waiting behind the stuck holder")
			}
			if len(look.Alarms.Current) != 1 || look.Alarms.Current[0].Node != "holder" || len(look.Alarms.Fresh) != 1 {
				t.Fatalf("alarms %+v, want the holder's, fresh", look.Alarms)
			}
			if got := len(look.Alarms.Raise) == 1; got != tc.report {
				t.Errorf("raised %+v, want the holder's alarm reported: %v", look.Alarms.Raise, tc.report)
			}
			want := cmpOr(tc.wait, 16*time.Second)
			if look.Wait != want {
				t.Errorf("looks again in %v, want %v", look.Wait, want)
			}
		})
	}
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// TestAlarmsOncePerReporter: an alarm is fresh (logged) when it first
// appears and raised once, in the first read that shows it while this
// node reports, even if it was seen from further back before; it is not
// raised again while the reads keep showing it, and is a new episode
// when it comes back after a read without it. A holding claim's alarm
// that turns into "not believed" is another alarm.
func TestAlarmsOncePerReporter(t *testing.T) {
	now := t0.Add(3 * time.Hour)
	acquired := now.Add(-2 * time.Hour)
	stuck := claim.Participant{Name: "holder", Ready: true, Claim: claim.Claim{State: claim.Holding, Since: acquired, Updated: acquired,
		Acquired: &acquired, Limits: claim.Limits{Concurrency: 1}, Phase: claim.PhaseRebooting}}
	forged := stuck
	forged.Err = fmt.Errorf("%w: acquired is 1h0m0s ahead", claim.ErrImplausible)
	f := &Front{Node: "me", AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute}
	for i, step := range []struct {
		snap          []claim.Participant
		report        bool
		fresh, raised int
	}{
		{[]claim.Participant{stuck}, false, 1, 0}, // seen from further back
		{[]claim.Participant{stuck}, true, 0, 1},  // at the front: raised now
		{[]claim.Participant{stuck}, true, 0, 0},  // once
		{[]claim.Participant{stuck}, false, 0, 0}, // a far-back read keeps it raised
		{[]claim.Participant{stuck}, true, 0, 0},
		{[]claim.Participant{forged}, true, 1, 1}, // not believed now: another alarm
		{nil, true, 0, 0},                         // gone
		{[]claim.Participant{forged}, true, 1, 1}, // back: a new episode
	} {
		news := f.Alarms(step.snap, now, step.report)
		if len(news.Fresh) != step.fresh || len(news.Raise) != step.raised || len(news.Current) != len(step.snap) {
			t.Errorf("step %d: %d fresh, %d raised, %d current; want %d, %d, %d", i,
				len(news.Fresh), len(news.Raise), len(news.Current), step.fresh, step.raised, len(step.snap))
		}
	}
}
