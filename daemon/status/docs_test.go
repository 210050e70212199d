package status

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDocsNameEveryField: docs/status.md describes every field of the JSON
// document.
func TestDocsNameEveryField(t *testing.T) {
	doc, err := os.ReadFile("../../docs/status.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ.PkgPath() == "time" {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" && !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("docs/status.md does not describe %s (%s.%s)", name, typ.Name(), f.Name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(Report{}))
	if len(seen) < 8 {
		t.Errorf("walked only %d types", len(seen))
	}
}
