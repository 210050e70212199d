package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kured-host/kured-host/daemon/metrics"
	"github.com/kured-host/kured-host/internal/docgen"
	"github.com/kured-host/kured-host/internal/golden"
)

// TestDocs keeps docs/operations.md's tables of Events and metrics in step
// with the code.
func TestDocs(t *testing.T) {
	err := docgen.Check("../docs/operations.md", map[string]string{
		"daemon/report.go":          eventsTable(),
		"daemon/metrics/metrics.go": metricsTable(t),
	}, golden.Update(), "go test ./daemon -update")
	if err != nil {
		t.Error(err)
	}
}

func eventsTable() string {
	var b strings.Builder
	b.WriteString("| reason | type | when |\n|---|---|---|\n")
	for _, r := range Reasons {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Reason, r.Type, r.When)
	}
	return b.String()
}

func metricsTable(t *testing.T) string {
	m := metrics.New()
	// kured's gauge has its node label once the sentinel has been read.
	m.RebootRequired.WithLabelValues("node").Set(0)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, f := range families {
		labels := map[string]bool{}
		var names []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !labels[l.GetName()] {
					labels[l.GetName()] = true
					names = append(names, "`"+l.GetName()+"`")
				}
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.GetName(), strings.ToLower(f.GetType().String()), strings.Join(names, ", "), f.GetHelp())
	}
	return b.String()
}
