// Package alarm reports the lock's alarms (claims that keep their place
// longer than they should, claims that cannot be read or are not
// believed) to the operator: a warning Event on the Node whose claim it is
// and the kured_host_claim_alarms metric.
package alarm

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/events"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/metrics"
)

// Event reasons for alarms, on the Node whose claim it is.
const (
	ReasonHolderAlarm     = "HolderAlarm"
	ReasonEnteringAlarm   = "EnteringAlarm"
	ReasonUnreadableClaim = "UnreadableClaim"
)

// Report turns alarms into a warning Event on the stuck node and the
// kured_host_claim_alarms metric. The lock decides which alarms this node
// writes, and that it writes each episode once (lock.AlarmReporter); each
// Event has a name of its own that no other node can predict
// (events.Recorder), so a compromised node can neither take the name
// first nor overwrite the Event. Several nodes at the front of the queue
// each write theirs: a few Events per episode, not one.
type Report struct {
	Events  *events.Recorder
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

var _ lock.AlarmReporter = (*Report)(nil)

// Raise writes the Event.
func (r *Report) Raise(ctx context.Context, a claim.Alarm) {
	if r.Events == nil {
		return
	}
	if err := r.Events.Emit(ctx, a.Node, corev1.EventTypeWarning, reason(a), "Node "+a.Node+" "+a.What); err != nil && r.Log != nil {
		r.Log.Warn("cannot write the alarm event", "err", err)
	}
}

// reason is the Event reason of an alarm.
func reason(a claim.Alarm) string {
	switch {
	case a.Unreadable:
		return ReasonUnreadableClaim
	case a.State == claim.Entering:
		return ReasonEnteringAlarm
	}
	return ReasonHolderAlarm
}

// Current sets the metric.
func (r *Report) Current(alarms []claim.Alarm) {
	if r.Metrics != nil {
		r.Metrics.SetAlarms(alarms)
	}
}
