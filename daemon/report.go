package daemon

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/kured-host/kured-host/daemon/alarm"
	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/notify"
)

// The reasons of the Events recorded on the node, one per transition of
// the cycle; they are stable, for alerts and `kubectl get events
// --field-selector reason=...`.
const (
	ReasonRebootRequired    = "RebootRequired"
	ReasonBlocked           = "Blocked"
	ReasonWaitingForSlot    = "WaitingForSlot"
	ReasonLeftQueue         = "LeftQueue"
	ReasonPaused            = "Paused"
	ReasonResumed           = "Resumed"
	ReasonSettingsApplied   = "SettingsApplied"
	ReasonSettingsInvalid   = "SettingsInvalid"
	ReasonConfigInvalid     = "ConfigInvalid"
	ReasonSlotAcquired      = "SlotAcquired"
	ReasonDrainFailed       = "DrainFailed"
	ReasonRebooting         = "Rebooting"
	ReasonRebootFailed      = "RebootFailed"
	ReasonRebootOverdue     = "RebootOverdue"
	ReasonRebooted          = "Rebooted"
	ReasonHealthCheckFailed = "HealthCheckFailed"
	ReasonUncordoned        = "Uncordoned"
	ReasonSlotReleased      = "SlotReleased"
	ReasonSlotLost          = "SlotLost"
)

// Reasons explains each reason, for the documentation (docs/operations.md
// is generated from it) and for anyone reading the code.
var Reasons = []struct{ Reason, Type, When string }{
	{ReasonRebootRequired, "Normal", "the sentinel says a reboot is needed; when nothing blocks it, the message also says it joined the queue"},
	{ReasonBlocked, "Normal", "a reboot is needed but a blocker holds it back (window, pods, alerts, inhibitors, the cluster's pause, the node's hold); the message lists them"},
	{ReasonWaitingForSlot, "Normal", "joined the queue for a reboot slot, after a blocker held it back (else RebootRequired says so)"},
	{ReasonLeftQueue, "Normal", "left the queue: the reboot is no longer needed, or a blocker appeared while waiting (a hold among them)"},
	{ReasonPaused, "Normal", "its turn came, or it was waiting, while the cluster is paused (kured-host pause): it keeps its place in the queue and takes no slot until resumed"},
	{ReasonResumed, "Normal", "a pause this node waited through has ended (kured-host resume): it goes on from its place in the queue"},
	{ReasonSettingsApplied, "Normal", "the cluster's settings (kured-host settings apply) changed what this node uses: the message says what, before and after; applied when the node joins the queue"},
	{ReasonSettingsInvalid, "Warning", "the cluster's settings are not valid, or not for this node (a Prometheus URL from the cluster where its own files set credentials): the node keeps what it had; the message names the key and line (once per version of the settings)"},
	{ReasonConfigInvalid, "Warning", "this node's own configuration files, read again when the cluster's settings changed, are no longer valid: the node keeps the configuration it loaded before; the message names the file, key and line"},
	{ReasonSlotAcquired, "Normal", "holds a reboot slot and has cordoned the node (or found it already unschedulable, and left it so); the message says how long it waited"},
	{ReasonDrainFailed, "Warning", "the drain failed or timed out: uncordoned and slot given back (or rebooting anyway with drain.force_reboot)"},
	{ReasonRebooting, "Normal", "every pod to evict is gone, and the reboot is being asked for (logind or the command); the message says how long the drain took"},
	{ReasonRebootFailed, "Warning", "the reboot request was refused; retried"},
	{ReasonRebootOverdue, "Warning", "still the same boot reboot.timeout after asking; asked again"},
	{ReasonRebooted, "Normal", "running in a new boot; the message says how long the reboot took"},
	{ReasonHealthCheckFailed, "Warning", "not Ready in the new boot, or the health command still fails, health.timeout after the reboot; the slot stays held"},
	{ReasonUncordoned, "Normal", "uncordoned (only when kured-host cordoned it) while the slot is held: a release delay, or a reboot given up"},
	{ReasonSlotReleased, "Normal", "the slot is free for the next node; with no release delay, the same write uncordoned the node, and the message says so"},
	{ReasonSlotLost, "Warning", "someone else removed or changed the claim before the reboot; the node is put back and starts over"},
	{alarm.ReasonHolderAlarm, "Warning", "another node has held a slot longer than lock.alarm_age (written once per episode by each node at the front of the queue: docs/claims.md)"},
	{alarm.ReasonEnteringAlarm, "Warning", "another node has been taking a slot longer than lock.entering_alarm_age"},
	{alarm.ReasonUnreadableClaim, "Warning", "a claim cannot be read, or is not believed (a time in the future, a recorded group its Node's labels contradict: docs/claims.md); it counts as holding a slot, with concurrency 1, until fixed or removed"},
}

// Marker sets kured's signals on this node's Node (daemon/marks).
type Marker interface {
	// What each mark changes: written alone (Write), or riding on a
	// claim write.
	InProgress(at time.Time) marks.Change
	Started() marks.Change
	Finished() marks.Change
	GaveUp() marks.Change
	NotNeeded() marks.Change

	Write(ctx context.Context, c marks.Change) error
}

// Messenger sends kured's notifications (daemon/notify); it logs its own
// failures and never blocks for long.
type Messenger interface {
	Send(ctx context.Context, kind notify.Kind, reason string)
}

// event records an Event on this node; failing to is logged, never fatal.
func (d *Daemon) event(ctx context.Context, log *slog.Logger, eventType, reason, message string) {
	if d.Events == nil {
		return
	}
	if err := d.Events.Emit(ctx, d.Node, eventType, reason, message); err != nil && ctx.Err() == nil {
		log.Warn("cannot record an event", "reason", reason, "err", err)
		d.countError("event")
	}
}

// message sends a notification, if any are configured.
func (d *Daemon) message(ctx context.Context, kind notify.Kind, reason string) {
	if d.Messages != nil {
		d.Messages.Send(ctx, kind, reason)
	}
}

// mark writes a node mark; marks are signals for others, so failing to
// write one is reported and the cycle goes on. It reports whether the
// mark was written.
func (d *Daemon) mark(ctx context.Context, log *slog.Logger, what string, pick func(Marker) marks.Change) bool {
	if d.Marks == nil {
		return false
	}
	if err := d.Marks.Write(ctx, pick(d.Marks)); err != nil {
		if ctx.Err() == nil {
			log.Warn("cannot mark the node; carrying on", "mark", what, "err", err)
			d.countError("marks")
		}
		return false
	}
	return true
}

// markState is what this daemon knows of kured's in-progress mark on its
// Node: unknown until it writes it, then what it wrote. Unknown, the
// Node as last read (at start, and with each claim write) tells.
type markState int8

const (
	markUnknown markState = iota
	markSet
	markClear
)

func (d *Daemon) inProgressMark() markState {
	if d.inProgress != markUnknown {
		return d.inProgress
	}
	if d.Lock.Annotation(marks.InProgress) != "" {
		return markSet
	}
	return markClear
}

// markNeeded sets kured's in-progress mark as kured does: a reboot is
// needed and the window is open, whether something else blocks it or
// not; once per need.
func (d *Daemon) markNeeded(ctx context.Context, log *slog.Logger, blocked []block.Blocked) {
	if d.Marks == nil || d.inProgressMark() == markSet ||
		slices.ContainsFunc(blocked, func(b block.Blocked) bool { return b.Kind == block.KindWindow }) {
		return
	}
	if d.mark(ctx, log, "reboot in progress", func(m Marker) marks.Change { return m.InProgress(d.Now()) }) {
		d.inProgress = markSet
	}
}

// neededMark is the in-progress mark when markNeeded, with nothing
// blocking, would write it: the join writes it instead (one write for
// both); done records it written.
func (d *Daemon) neededMark() (with marks.Change, done func()) {
	if d.Marks == nil || d.inProgressMark() == markSet {
		return marks.Change{}, func() {}
	}
	return d.Marks.InProgress(d.Now()), func() { d.inProgress = markSet }
}

// markNotNeeded takes the in-progress mark back when the need went away
// without a reboot by kured-host; no request when it is not there.
func (d *Daemon) markNotNeeded(ctx context.Context, log *slog.Logger) {
	if d.Marks == nil || d.inProgressMark() == markClear {
		return
	}
	if d.mark(ctx, log, "reboot no longer needed", Marker.NotNeeded) {
		d.inProgress = markClear
	}
}

func (d *Daemon) countError(kind string) {
	if d.Metrics != nil {
		d.Metrics.Errors.WithLabelValues(kind).Inc()
	}
}

func (d *Daemon) setStateMetric(s string) {
	if d.Metrics != nil {
		d.Metrics.SetState(s)
	}
}

func (d *Daemon) setBlockersMetric(blocked []block.Blocked) {
	if d.Metrics == nil {
		return
	}
	kinds := make([]string, len(blocked))
	for i, b := range blocked {
		kinds[i] = b.Kind
	}
	d.Metrics.SetBlockers(kinds)
}

func (d *Daemon) setQueuePositionMetric(p float64) {
	if d.Metrics != nil {
		d.Metrics.QueuePosition.Set(p)
	}
}
