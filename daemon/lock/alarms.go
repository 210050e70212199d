package lock

import (
	"context"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// AlarmReporter is told about claims that keep their place longer than
// they should.
type AlarmReporter interface {
	// Raise is called once for each new alarm.
	Raise(ctx context.Context, a claim.Alarm)
	// Current is called with every alarm each time the lock looks.
	Current(alarms []claim.Alarm)
}

// raiseAlarms reports each alarm once, when it first appears.
func (l *Lock) raiseAlarms(ctx context.Context, snap []claim.Participant, now time.Time) {
	alarms := claim.Alarms(snap, now, l.o.AlarmAge, l.o.EnteringAlarmAge)
	l.mu.Lock()
	seen := map[string]bool{}
	var fresh []claim.Alarm
	for _, a := range alarms {
		key := a.Node + "/" + string(a.State)
		seen[key] = true
		if !l.alarmed[key] {
			fresh = append(fresh, a)
		}
	}
	l.alarmed = seen
	l.mu.Unlock()
	for _, a := range fresh {
		l.log.Warn("claim alarm: node "+a.Node+" "+a.What, "node", a.Node, "state", string(a.State), "age", a.Age.Round(time.Second))
		if l.o.Alarms != nil {
			l.o.Alarms.Raise(ctx, a)
		}
	}
	if l.o.Alarms != nil {
		l.o.Alarms.Current(alarms)
	}
}
