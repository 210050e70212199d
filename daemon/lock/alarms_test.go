package lock

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/queue"
)

// TestLookReportsAlarmsAtTheFront: a holder stuck for two hours blocks
// the queue (concurrency 1). Every waiting node that looks logs the alarm
// and counts it, but only a node with fewer than three waiting claims
// ahead of it that it does not pass over writes the Event: the Events'
// names are random (daemon/events), so every node writing one would make
// one per waiting node. A node that joined less than alarmSettle ago
// does not report yet (nodes that joined with it may not show in the
// front yet) and says when it will.
func TestLookReportsAlarmsAtTheFront(t *testing.T) {
	server := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	limits := claim.Limits{Concurrency: 1}
	acquired := server.Add(-2 * time.Hour)
	holder := claimedNode(t, "holder", "zone-a", claim.Claim{State: claim.Holding, Since: server.Add(-3 * time.Hour), Updated: acquired,
		Acquired: &acquired, Limits: limits, Groups: map[string]string{config.ZoneLabel: "zone-a"}, BootID: "b", Phase: claim.PhaseRebooting})
	for _, tc := range []struct {
		name     string
		ahead    int           // waiting claims ahead of this node
		notReady int           // of which NotReady (passed over)
		joined   time.Duration // this node's claim's age
		want     bool
		reportIn time.Duration
	}{
		{"first in the queue", 0, 0, time.Minute, true, 0},
		{"two ahead", 2, 0, time.Minute, true, 0},
		{"three ahead", 3, 0, time.Minute, false, 0},
		{"five ahead", 5, 0, time.Minute, false, 0},
		{"three ahead, one NotReady", 3, 1, time.Minute, true, 0},
		{"four ahead, one NotReady", 4, 1, time.Minute, false, 0},
		{"first, joined 2s ago", 0, 0, 2 * time.Second, false, alarmSettle - 2*time.Second},
		{"first, joined alarmSettle ago", 0, 0, alarmSettle, true, 0},
		{"three ahead, joined 2s ago", 3, 0, 2 * time.Second, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{holder}
			for i := range tc.ahead {
				at := server.Add(time.Duration(i-60) * time.Minute)
				n := claimedNode(t, fmt.Sprintf("w%d", i), "zone-b", claim.Claim{State: claim.Waiting, Since: at, Updated: at, Limits: limits})
				n.Labels[queue.FrontLabel] = string(queue.RoleIn) // the front is what a node reads
				if i < tc.notReady {
					n.Status.Conditions[0].Status = corev1.ConditionFalse
				}
				objs = append(objs, n)
			}
			objs = append(objs, claimedNode(t, "me", "zone-b", claim.Claim{State: claim.Waiting, Since: server.Add(-tc.joined), Updated: server, Limits: limits}))
			rec := &alarmRecorder{}
			l := New(Options{
				Client: fake.NewClientset(objs...), Node: "me", Limits: limits,
				AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute, ClockTolerance: 5 * time.Minute,
				Now: func() time.Time { return server }, ServerNow: func() time.Time { return server },
				Alarms: rec,
			})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			snap, err := l.frontSnapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, admitted, reportIn := l.look(ctx, snap, server)
			if admitted {
				t.Fatal("look: admitted; want waiting behind the stuck holder")
			}
			if reportIn != tc.reportIn {
				t.Errorf("reports in %v, want %v", reportIn, tc.reportIn)
			}
			if len(rec.current) != 1 || rec.current[0].Node != "holder" || rec.current[0].State != claim.Holding {
				t.Fatalf("current alarms %+v, want the holder's", rec.current)
			}
			if got := len(rec.raised) == 1; got != tc.want || len(rec.raised) > 1 {
				t.Errorf("raised %+v, want the holder's alarm reported: %v", rec.raised, tc.want)
			}
		})
	}
}

// TestRaiseAlarmsOncePerReporter: an alarm is logged when it first
// appears and reported once, in the first read that shows it while this
// node reports, even if it was seen from further back before; it is not
// reported again while the reads keep showing it, and is a new episode
// when it comes back after a read without it. A holding claim's alarm
// that turns into "not believed" is another alarm.
func TestRaiseAlarmsOncePerReporter(t *testing.T) {
	server := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	acquired := server.Add(-2 * time.Hour)
	stuck := claim.Participant{Name: "holder", Ready: true, Claim: claim.Claim{State: claim.Holding, Since: acquired, Updated: acquired,
		Acquired: &acquired, Limits: claim.Limits{Concurrency: 1}, Phase: claim.PhaseRebooting}}
	forged := stuck
	forged.Err = fmt.Errorf("%w: acquired is 1h0m0s ahead", claim.ErrImplausible)
	rec := &alarmRecorder{}
	l := New(Options{Node: "me", AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute, Alarms: rec})
	ctx := context.Background()
	for i, step := range []struct {
		snap   []claim.Participant
		report bool
		raised int // in all, so far
	}{
		{[]claim.Participant{stuck}, false, 0}, // seen from further back
		{[]claim.Participant{stuck}, true, 1},  // at the front: reported now
		{[]claim.Participant{stuck}, true, 1},  // once
		{[]claim.Participant{stuck}, false, 1}, // a far-back read keeps it reported
		{[]claim.Participant{stuck}, true, 1},
		{[]claim.Participant{forged}, true, 2}, // not believed now: another alarm
		{nil, true, 2},                         // gone
		{[]claim.Participant{forged}, true, 3}, // back: a new episode
	} {
		l.raiseAlarms(ctx, step.snap, server, step.report)
		if len(rec.raised) != step.raised {
			t.Fatalf("step %d: %d raised (%+v), want %d", i, len(rec.raised), rec.raised, step.raised)
		}
		if len(rec.current) != len(step.snap) {
			t.Errorf("step %d: current %+v", i, rec.current)
		}
	}
}
