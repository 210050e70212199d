// Package metrics defines kured-host's Prometheus metrics, on a registry of
// its own (no global state), including kured's kured_reboot_required gauge
// so that existing dashboards keep working.
package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kured-host/kured-host/daemon/claim"
)

// Metrics are the daemon's metrics.
type Metrics struct {
	Registry *prometheus.Registry
	// RebootRequired is kured's gauge: 1 while the node needs a reboot.
	RebootRequired *prometheus.GaugeVec
	// ClaimAlarms counts the claims, in this node's view, that keep their
	// place longer than they should, by state (holding, entering, or
	// unreadable).
	ClaimAlarms *prometheus.GaugeVec
	// State is 1 for the state this node's cycle is in, 0 for the others.
	State *prometheus.GaugeVec
	// QueuePosition is the number of waiting nodes ahead of this one in
	// the front of the queue; NaN behind the front (not known); -1 when
	// it is not waiting.
	QueuePosition prometheus.Gauge
	// SlotWait is the time from joining the queue to holding a slot.
	SlotWait prometheus.Histogram
	// DrainDuration is the time a drain took, whether it succeeded or not.
	DrainDuration *prometheus.HistogramVec
	// RebootDuration is the time from asking for the reboot to the daemon
	// running again in the new boot.
	RebootDuration prometheus.Histogram
	// Blockers is 1 for each kind of blocker that currently holds the
	// reboot back.
	Blockers *prometheus.GaugeVec
	// Errors counts failures by kind.
	Errors *prometheus.CounterVec
}

// States are the values of State's state label, in the order of a cycle.
var States = []string{"idle", "blocked", "waiting", "paused", "entering", "draining", "rebooting", "rebooted", "unreadable"}

// BlockerKinds are the values of Blockers' kind label (daemon/block).
var BlockerKinds = []string{"window", "pods", "alerts", "inhibitors"}

// ErrorKinds are the values of Errors' kind label: the sentinel could not
// be read, a step of the cycle failed and is retried (usually the API
// server), a drain or reboot failed, the node was not healthy in time
// after the reboot, a node mark, notification or Event could not be
// written, the cluster's settings could not be applied, or the metrics
// could not be served (Serve tries again).
var ErrorKinds = []string{"sentinel", "step", "drain", "reboot", "health", "marks", "notify", "event", "settings", "metrics"}

// New creates the metrics on a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		RebootRequired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kured", Name: "reboot_required",
			Help: "OS requires reboot due to software updates.",
		}, []string{"node"}),
		ClaimAlarms: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kured_host", Name: "claim_alarms",
			Help: "Claims holding or taking a reboot slot for longer than the alarm age, or unreadable, as this node sees them.",
		}, []string{"state"}),
	}
	m.State = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kured_host", Name: "state",
		Help: "1 for the state this node's reboot cycle is in: " + strings.Join(States, ", ") + ".",
	}, []string{"state"})
	m.QueuePosition = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "kured_host", Name: "queue_position",
		Help: "Waiting nodes ahead of this one in the front of the queue for a reboot slot; NaN behind the front, where it is not read; -1 when not waiting.",
	})
	// Waits and reboots are minutes to hours; drains seconds to an hour.
	m.SlotWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kured_host", Name: "slot_wait_seconds",
		Help:    "Time from joining the queue to holding a reboot slot.",
		Buckets: []float64{1, 10, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400},
	})
	m.DrainDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "kured_host", Name: "drain_duration_seconds",
		Help:    "Time the drain took, by result (ok or failed).",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
	}, []string{"result"})
	m.RebootDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kured_host", Name: "reboot_duration_seconds",
		Help:    "Time from asking for the reboot to kured-host running again in the new boot.",
		Buckets: []float64{10, 30, 60, 120, 300, 600, 900, 1800, 3600},
	})
	m.Blockers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kured_host", Name: "blockers",
		Help: "1 for each kind of blocker holding the reboot back: " + strings.Join(BlockerKinds, ", ") + ".",
	}, []string{"kind"})
	m.Errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kured_host", Name: "errors_total",
		Help: "Failures by kind: " + strings.Join(ErrorKinds, ", ") + ".",
	}, []string{"kind"})
	m.Registry.MustRegister(m.RebootRequired, m.ClaimAlarms, m.State, m.QueuePosition,
		m.SlotWait, m.DrainDuration, m.RebootDuration, m.Blockers, m.Errors)
	for _, s := range AlarmStates {
		m.ClaimAlarms.WithLabelValues(s).Set(0)
	}
	// Every series exists from the start, so that rate() and absent()
	// work before the first reboot.
	m.SetState("idle")
	m.QueuePosition.Set(-1)
	m.SetBlockers(nil)
	for _, k := range ErrorKinds {
		m.Errors.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "failed"} {
		m.DrainDuration.WithLabelValues(r)
	}
	return m
}

// SetState makes state the current one.
func (m *Metrics) SetState(state string) {
	for _, s := range States {
		v := 0.0
		if s == state {
			v = 1
		}
		m.State.WithLabelValues(s).Set(v)
	}
}

// SetBlockers marks the kinds that block now.
func (m *Metrics) SetBlockers(kinds []string) {
	for _, k := range BlockerKinds {
		m.Blockers.WithLabelValues(k).Set(0)
	}
	for _, k := range kinds {
		m.Blockers.WithLabelValues(k).Set(1)
	}
}

// AlarmStates are the values of ClaimAlarms' state label.
var AlarmStates = []string{string(claim.Holding), string(claim.Entering), "unreadable"}

// SetAlarms sets ClaimAlarms from the current alarms.
func (m *Metrics) SetAlarms(alarms []claim.Alarm) {
	counts := map[string]int{}
	for _, a := range alarms {
		counts[AlarmState(a)]++
	}
	for _, s := range AlarmStates {
		m.ClaimAlarms.WithLabelValues(s).Set(float64(counts[s]))
	}
}

// AlarmState is the metric's state label for an alarm.
func AlarmState(a claim.Alarm) string {
	if a.Unreadable {
		return "unreadable"
	}
	return string(a.State)
}
