// Package metrics defines kured-host's Prometheus metrics, on a registry of
// its own (no global state), including kured's kured_reboot_required gauge
// so that existing dashboards keep working.
package metrics

import (
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
}

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
	m.Registry.MustRegister(m.RebootRequired, m.ClaimAlarms)
	for _, s := range AlarmStates {
		m.ClaimAlarms.WithLabelValues(s).Set(0)
	}
	return m
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
