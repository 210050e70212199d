package lock

import (
	"context"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// AlarmReporter is told about claims that keep their place longer than
// they should.
type AlarmReporter interface {
	// Raise is called once for each alarm this node reports
	// (queue.Front.Alarms), the first time a read shows it while this node
	// reports: the reporter writes an Event.
	Raise(ctx context.Context, a claim.Alarm)
	// Current is called with every alarm each time the lock looks.
	Current(alarms []claim.Alarm)
}

// reportAlarms logs each alarm that a read shows for the first time,
// has the reporter write an Event for each the Front says this node
// reports now, and gives it the current ones for its metric.
func (l *Lock) reportAlarms(ctx context.Context, news queue.AlarmNews) {
	for _, a := range news.Fresh {
		l.log.Warn("claim alarm: node "+a.Node+" "+a.What, "node", a.Node, "state", string(a.State), "age", a.Age.Round(time.Second))
	}
	if l.o.Alarms == nil {
		return
	}
	for _, a := range news.Raise {
		l.o.Alarms.Raise(ctx, a)
	}
	l.o.Alarms.Current(news.Current)
}
