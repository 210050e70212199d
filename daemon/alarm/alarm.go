// Package alarm reports the lock's alarms (claims that keep their place
// longer than they should, claims that cannot be read or are not
// believed) to the operator: a warning Event on the Node whose claim it is,
// once per episode, and the kured_host_claim_alarms metric.
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

// Report turns alarms into a warning Event on the stuck node (one per
// episode, whichever node sees it first) and the kured_host_claim_alarms
// metric.
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
