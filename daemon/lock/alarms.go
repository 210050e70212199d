package lock

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/events"
	"github.com/kured-host/kured-host/daemon/metrics"
)

// Event reasons for alarms, on the Node whose claim it is.
const (
	ReasonHolderAlarm     = "HolderAlarm"
	ReasonEnteringAlarm   = "EnteringAlarm"
	ReasonUnreadableClaim = "UnreadableClaim"
)

// Report turns alarms into a warning Event on the stuck node (one per
// episode, whichever node sees it first) and the kured_host_claim_alarms
// metric.
type Report struct {
	Events  *events.Recorder
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

var _ AlarmReporter = (*Report)(nil)

// Raise writes the Event.
func (r *Report) Raise(ctx context.Context, a claim.Alarm) {
	if r.Events == nil {
		return
	}
	reason := ReasonHolderAlarm
	switch {
	case a.Unreadable:
		reason = ReasonUnreadableClaim
	case a.State == claim.Entering:
		reason = ReasonEnteringAlarm
	}
	key := a.Node + "/" + string(a.State) + "/" + a.Since.String()
	if err := r.Events.Once(ctx, a.Node, corev1.EventTypeWarning, reason, "Node "+a.Node+" "+a.What, key); err != nil && r.Log != nil {
		r.Log.Warn("cannot write the alarm event", "err", err)
	}
}

// Current sets the metric.
func (r *Report) Current(alarms []claim.Alarm) {
	if r.Metrics != nil {
		r.Metrics.SetAlarms(alarms)
	}
}

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
