package config

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kured-host/kured-host/internal/docgen"
	"github.com/kured-host/kured-host/internal/golden"
)

// TestDocs keeps the generated parts of docs/configuration.md in step with
// config.toml.example and the kured option table.
func TestDocs(t *testing.T) {
	example, err := os.ReadFile("../../config.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	err = docgen.Check("../../docs/configuration.md", map[string]string{
		"config.toml.example":    "```toml\n" + string(example) + "```\n",
		"daemon/config/kured.go": kuredTable(),
		"daemon/config/load.go":  clusterTable(),
	}, golden.Update(), "go test ./daemon/config -update")
	if err != nil {
		t.Error(err)
	}
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

func clusterTable() string {
	var b strings.Builder
	b.WriteString("| key the cluster may set | why |\n|---|---|\n")
	for _, k := range ClusterKeys {
		fmt.Fprintf(&b, "| `%s` | %s |\n", k.Key, strings.ReplaceAll(k.Why, "|", `\|`))
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
