package daemon

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kured-host/kured-host/daemon/metrics"
)

var update = flag.Bool("update", false, "rewrite the generated parts of docs/operations.md")

// TestDocs keeps docs/operations.md's tables of Events and metrics in step
// with the code.
func TestDocs(t *testing.T) {
	const path = "../docs/operations.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(doc)
	for source, body := range map[string]string{
		"daemon/report.go":          eventsTable(),
		"daemon/metrics/metrics.go": metricsTable(t),
	} {
		re := regexp.MustCompile(`(?s)(<!-- BEGIN generated from ` + regexp.QuoteMeta(source) + `[^\n]*-->\n).*?(<!-- END generated -->)`)
		if !re.MatchString(got) {
			t.Fatalf("%s has no generated section for %s", path, source)
		}
		got = re.ReplaceAllLiteralString(got, re.FindStringSubmatch(got)[1]+body+"<!-- END generated -->")
	}
	if got == string(doc) {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date: run go test ./daemon -update", path)
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
