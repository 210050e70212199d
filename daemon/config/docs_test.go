package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocs keeps the generated parts of docs/configuration.md in step with
// config.toml.example and the kured option table.
func TestDocs(t *testing.T) {
	const path = "../../docs/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../config.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{
		"config.toml.example":    "```toml\n" + string(example) + "```\n",
		"daemon/config/kured.go": kuredTable(),
	}
	got := string(doc)
	for source, body := range sections {
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
	t.Errorf("%s is out of date: run go test ./daemon/config -update", path)
}

func kuredTable() string {
	var b strings.Builder
	b.WriteString("| kured flag | kured-host key | notes |\n|---|---|---|\n")
	for _, o := range KuredOptions {
		key := "—"
		if o.Key != "" {
			key = "`" + o.Key + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", o.Flag, key, strings.ReplaceAll(o.Note, "|", `\|`))
	}
	return b.String()
}

// TestKuredOptionsNameRealKeys: every key the table points kured users at
// exists in the schema.
func TestKuredOptionsNameRealKeys(t *testing.T) {
	data, err := Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	l, err := LoadFiles(writeTemp(t, data))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range KuredOptions {
		if o.Key == "" {
			if o.Note == "" {
				t.Errorf("%s has neither a key nor a reason", o.Flag)
			}
			continue
		}
		if _, ok := l.Origins[o.Key]; !ok {
			t.Errorf("%s maps to %q, which is not a key", o.Flag, o.Key)
		}
	}
}
