// Package docgen keeps the generated parts of the documentation in step
// with the code: sections between
//
//	<!-- BEGIN generated from SOURCE ... -->
//	<!-- END generated -->
//
// are replaced by what the code says they contain.
package docgen

import (
	"fmt"
	"os"
	"regexp"
)

// Splice returns doc with the section generated from each source replaced
// by its body.
func Splice(doc string, bodies map[string]string) (string, error) {
	for source, body := range bodies {
		re := regexp.MustCompile(`(?s)(<!-- BEGIN generated from ` + regexp.QuoteMeta(source) + `[^\n]*-->\n).*?(<!-- END generated -->)`)
		m := re.FindStringSubmatch(doc)
		if m == nil {
			return "", fmt.Errorf("no generated section for %s", source)
		}
		doc = re.ReplaceAllLiteralString(doc, m[1]+body+"<!-- END generated -->")
	}
	return doc, nil
}

// Check compares the file at path with its generated sections. With
// update it rewrites the file; otherwise a difference is an error that
// says how to update it (the command given).
func Check(path string, bodies map[string]string, update bool, command string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	got, err := Splice(string(b), bodies)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case got == string(b):
		return nil
	case update:
		return os.WriteFile(path, []byte(got), 0o644)
	}
	return fmt.Errorf("%s is out of date: run %s", path, command)
}
