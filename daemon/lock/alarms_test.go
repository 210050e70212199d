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
// one per waiting node. A node that joined less than queue.AlarmSettle ago
// does not report yet (nodes that joined with it may not show in the
// front yet) and looks again when it will.
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
		{"first, joined 2s ago", 0, 0, 2 * time.Second, false, queue.AlarmSettle - 2*time.Second},
		{"first, joined queue.AlarmSettle ago", 0, 0, queue.AlarmSettle, true, 0},
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
				Client: fake.NewClientset(objs...), Node: "me", Limits: limits, WaitingGrace: 10 * time.Minute,
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
			look := l.front.Look(queue.View{Self: l.self(), Snap: snap, Now: server, Server: server})
			l.reportAlarms(ctx, look.Alarms)
			if look.Admitted {
				t.Fatal("look: admitted; want waiting behind the stuck holder")
			}
			// Without a report due, the next look is 16 s away at the
			// least (a quarter of the grace, 15 s at most, and a second,
			// jittered); with one, when it is due.
			if tc.reportIn > 0 && look.Wait != tc.reportIn || tc.reportIn == 0 && look.Wait < 16*time.Second {
				t.Errorf("looks again in %v, want %v", look.Wait, tc.reportIn)
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
