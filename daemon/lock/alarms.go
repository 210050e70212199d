package lock

import (
	"context"
	"strconv"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// AlarmReporter is told about claims that keep their place longer than
// they should.
type AlarmReporter interface {
	// Raise is called once for each alarm this node reports
	// (reportsAlarms), the first time a read shows it while this node
	// reports: the reporter writes an Event.
	Raise(ctx context.Context, a claim.Alarm)
	// Current is called with every alarm each time the lock looks.
	Current(alarms []claim.Alarm)
}

// alarmFront is how many waiting claims ahead of it that it does not pass
// over a node may see and still write alarm Events (reportsAlarms).
const alarmFront = 3

// alarmSettle is how long after it joined a waiting node waits before it
// writes alarm Events from the front. A join's place in the queue is the
// server's time before its write, and a node shows in the front's watches
// only once it has written its front label: nodes that joined together
// see a front without those whose writes were slower, and more than
// alarmFront of them would each count itself among the first. The settle
// is many times what a join, its read of the queue and its label take on
// a server that answers.
const alarmSettle = 10 * time.Second

// reportsAlarms is the rule for which nodes write alarm Events: an entering
// node (verify), and a waiting node at the front of the queue as q has it,
// with fewer than alarmFront waiting claims ahead of it that it does not
// pass over. The Events have names nobody can predict (daemon/events), so
// they cannot be shared: were every node that sees a stuck holder to
// write one, a queue of 500 would write 500. Nodes further back in the
// front log the alarm and count it in the metric, but write no Event;
// nodes behind the front do not see it. A waiting node reports only once
// its place has settled (alarmSettle). Every node of the front reads
// every active claim, so the front always sees the alarms about them;
// claims not passed over are counted so that a front of NotReady or
// silent nodes, whose daemons write nothing, does not keep every node
// from reporting.
func reportsAlarms(q claim.Queue, self string) bool {
	pos := q.Position(self)
	if pos < 0 {
		return false
	}
	ahead := 0
	for _, n := range q.Waiting[:pos] {
		if _, skipped := q.Skipped[n]; !skipped {
			ahead++
		}
	}
	return ahead < alarmFront
}

// raiseAlarms logs each alarm once, when it first appears, and, when this
// node reports them (report), has each reported once: in the first read
// that shows it while this node reports, whether it was new then or seen
// from further back. An alarm is the same while this lock's reads keep
// showing it; one that is gone from a read and comes back is new (a claim
// fixed and broken again).
func (l *Lock) raiseAlarms(ctx context.Context, snap []claim.Participant, now time.Time, report bool) {
	alarms := claim.Alarms(snap, now, l.o.AlarmAge, l.o.EnteringAlarmAge)
	l.mu.Lock()
	seen := map[string]bool{} // alarm -> reported by this node
	var fresh, raise []claim.Alarm
	for _, a := range alarms {
		key := a.Node + "/" + string(a.State) + "/" + strconv.FormatBool(a.Unreadable)
		reported, known := l.alarmed[key]
		if !known {
			fresh = append(fresh, a)
		}
		if report && !reported {
			raise, reported = append(raise, a), true
		}
		seen[key] = reported
	}
	l.alarmed = seen
	l.mu.Unlock()
	for _, a := range fresh {
		l.log.Warn("claim alarm: node "+a.Node+" "+a.What, "node", a.Node, "state", string(a.State), "age", a.Age.Round(time.Second))
	}
	if l.o.Alarms == nil {
		return
	}
	for _, a := range raise {
		l.o.Alarms.Raise(ctx, a)
	}
	l.o.Alarms.Current(alarms)
}
