package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Origin is where a key's value came from.
type Origin struct {
	File string // empty for the built-in default
	Line int    // 0 when the decoder does not know it
}

func (o Origin) String() string {
	switch {
	case o.File == "":
		return "built-in default"
	case o.Line == 0:
		return o.File
	default:
		return fmt.Sprintf("%s:%d", o.File, o.Line)
	}
}

// Problem is one thing wrong with the configuration.
type Problem struct {
	Origin
	Key     string // dotted path such as "lock.groups[0].max"; empty for the whole file
	Message string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.Origin.String())
		b.WriteString(": ")
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	if p.File == "" && p.Key != "" {
		b.WriteString(" (built-in default)")
	}
	return b.String()
}

// Error is an invalid configuration: every problem found, in file and line
// order. Callers test for it with errors.As to choose exit status 2.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	if len(lines) == 1 {
		return "invalid configuration: " + lines[0]
	}
	return fmt.Sprintf("invalid configuration (%d problems):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// problems collects Problems; files lists the files in load order so that
// the report follows the order in which they were read.
type problems struct {
	list  []Problem
	files []string
}

func (ps *problems) add(o Origin, key, format string, args ...any) {
	ps.list = append(ps.list, Problem{Origin: o, Key: key, Message: fmt.Sprintf(format, args...)})
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	rank := func(file string) int {
		if i := slices.Index(ps.files, file); i >= 0 {
			return i
		}
		return len(ps.files)
	}
	sorted := slices.Clone(ps.list)
	slices.SortStableFunc(sorted, func(a, b Problem) int {
		return cmp.Or(
			cmp.Compare(rank(a.File), rank(b.File)),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Key, b.Key),
		)
	})
	return &Error{Problems: sorted}
}
