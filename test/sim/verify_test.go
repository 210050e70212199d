package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
	"github.com/kured-host/kured-host/test/sim/api"
)

// TestVerifyReadsTheFrontFromItsWatch: the verify takes the places of the
// front's waiting members (for Yield) from the watch of the front once
// its cache holds the announce, and lists them only when the watch is
// later than that. With the watches on time no node lists the front;
// with every watch 3 s late each verify does; either way the roll
// completes and the checkers find nothing.
func TestVerifyReadsTheFrontFromItsWatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lag   time.Duration
		lists bool // whether the verifies list the front
	}{
		{"the watches on time", 0, false},
		{"every watch 3 s late", 3 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := smallCluster(4)
			o.Script = func(w *World) {
				w.store.Meter = api.NewMeter()
				if tc.lag > 0 {
					w.store.Faults.WatchLag = func(api.Request) time.Duration { return tc.lag }
				}
			}
			w, res := runScenario(t, o, 0)
			if len(res.Violations) > 0 || !res.Completed {
				t.Fatalf("completed: %v; violations:\n  %s\ntrace:\n%s", res.Completed, strings.Join(res.Violations, "\n  "), strings.Join(res.Trace, "\n"))
			}
			announces := 0
			last := map[string]string{}
			for _, r := range w.store.Revisions() {
				state := r.Node.Labels[claim.Label]
				if state == string(claim.Entering) && last[r.Node.Name] != state {
					announces++
				}
				last[r.Node.Name] = state
			}
			// Every List of the front comes with one of the active claims
			// (a read of the front without its watch, or a verify that
			// lists the front); a verify on time lists the active claims
			// alone.
			var fronts, actives int
			for kind, k := range w.store.Meter.Kinds() {
				switch {
				case strings.HasPrefix(kind, "list nodes label="+queue.FrontLabel+","):
					fronts += k.Requests
				case strings.HasPrefix(kind, "list nodes label="+claim.Label+","+claim.Label+"!="+string(claim.Waiting)+" "):
					actives += k.Requests
				}
			}
			if announces < len(w.Hosts) {
				t.Fatalf("%d announces for %d nodes", announces, len(w.Hosts))
			}
			t.Logf("%d announces, %d Lists of the active claims, %d of the front", announces, actives, fronts)
			if tc.lists && fronts != actives {
				t.Errorf("%d Lists of the front, %d of the active claims: want one with each", fronts, actives)
			}
			if !tc.lists && fronts+announces > actives {
				t.Errorf("%d Lists of the front, %d of the active claims, %d announces: a verify listed the front", fronts, actives, announces)
			}
		})
	}
}
