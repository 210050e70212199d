package metrics

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kured-host/kured-host/daemon/claim"
)

func TestAlarms(t *testing.T) {
	m := New()
	m.SetAlarms([]claim.Alarm{
		{Node: "a", State: claim.Holding}, {Node: "b", State: claim.Holding},
		{Node: "c", State: claim.Entering}, {Node: "d", State: claim.Holding, Unreadable: true},
	})
	want := `
# HELP kured_host_claim_alarms Claims holding or taking a reboot slot for longer than the alarm age, or unreadable, as this node sees them.
# TYPE kured_host_claim_alarms gauge
kured_host_claim_alarms{state="entering"} 1
kured_host_claim_alarms{state="holding"} 2
kured_host_claim_alarms{state="unreadable"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "kured_host_claim_alarms"); err != nil {
		t.Error(err)
	}
	m.SetAlarms(nil)
	if got := testutil.ToFloat64(m.ClaimAlarms.WithLabelValues("holding")); got != 0 {
		t.Errorf("holding alarms %v after they cleared", got)
	}
	m.RebootRequired.WithLabelValues("n1").Set(1)
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP kured_reboot_required OS requires reboot due to software updates.
# TYPE kured_reboot_required gauge
kured_reboot_required{node="n1"} 1
`), "kured_reboot_required"); err != nil {
		t.Error(err)
	}
}

func TestStateAndBlockers(t *testing.T) {
	m := New()
	for _, tc := range []struct {
		state    string
		blockers []string
	}{
		{"idle", nil},
		{"blocked", []string{"window", "inhibitors"}},
		{"waiting", nil},
		{"rebooting", nil},
	} {
		m.SetState(tc.state)
		m.SetBlockers(tc.blockers)
		for _, s := range States {
			want := 0.0
			if s == tc.state {
				want = 1
			}
			if got := testutil.ToFloat64(m.State.WithLabelValues(s)); got != want {
				t.Errorf("in %s: state %s = %v, want %v", tc.state, s, got, want)
			}
		}
		for _, k := range BlockerKinds {
			want := 0.0
			if slices.Contains(tc.blockers, k) {
				want = 1
			}
			if got := testutil.ToFloat64(m.Blockers.WithLabelValues(k)); got != want {
				t.Errorf("in %s: blockers %s = %v, want %v", tc.state, k, got, want)
			}
		}
	}
}

// TestEverySeriesFromTheStart: dashboards and absent() alerts see every
// series before the first reboot.
func TestEverySeriesFromTheStart(t *testing.T) {
	m := New()
	n, err := testutil.GatherAndCount(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	// states + queue position + blockers + errors + alarm states + 2 drain
	// results; histograms without observations count as one each.
	want := len(States) + 1 + len(BlockerKinds) + len(ErrorKinds) + len(AlarmStates) + 2 + 2
	if n != want {
		t.Errorf("%d series at start, want %d", n, want)
	}
}
