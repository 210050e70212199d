// Package doctor checks the host and the cluster for what `kured-host run`
// needs, without starting it: the kubeconfig, the node's identity, every
// permission the daemon uses, the clock against the API server's, the
// reboot sentinel, Prometheus (if it blocks reboots), logind on the system
// bus and the metrics address. Each
// check is a small function of injected dependencies that returns
// Findings; Run wires the real ones for `kured-host check`.
package doctor

import (
	"fmt"
	"io"
	"strings"

	"github.com/kured-host/kured-host/daemon/printable"
)

// Level is how a finding affects the daemon.
type Level int

// Levels, from harmless to blocking.
const (
	// OK: as the daemon needs it.
	OK Level = iota
	// Warn: the daemon works, but something deserves a look.
	Warn
	// Fail: the daemon would not start, or would not do its job.
	Fail
)

func (l Level) String() string {
	switch l {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// Finding is the outcome of one check.
type Finding struct {
	Level Level
	// Check names what was checked: "kubeconfig", "permissions", ...
	Check string
	// Message is one line: what was found and, if not ok, what to do.
	Message string
	// Detail is printed under the line, indented (the RBAC manifest).
	Detail string
}

func finding(level Level, check, format string, args ...any) Finding {
	return Finding{Level: level, Check: check, Message: fmt.Sprintf(format, args...)}
}

// String is the finding's line: "ok   check: message".
func (f Finding) String() string {
	return fmt.Sprintf("%-4s %s: %s", f.Level, f.Check, f.Message)
}

// detailIndent lines up Detail under the check's name.
const detailIndent = "     "

// Render writes the finding's line and its indented detail.
// Findings quote the cluster (API errors, the cluster's settings): what
// a terminal would act on is escaped (daemon/printable).
func Render(w io.Writer, f Finding) error {
	var b strings.Builder
	b.WriteString(printable.String(f.String()))
	b.WriteByte('\n')
	if d := strings.TrimRight(f.Detail, "\n"); d != "" {
		for _, line := range strings.Split(d, "\n") {
			if line != "" {
				b.WriteString(detailIndent + printable.String(line))
			}
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Count returns how many findings have each level.
func Count(fs []Finding) map[Level]int {
	n := map[Level]int{}
	for _, f := range fs {
		n[f.Level]++
	}
	return n
}

// Worst is the highest level among the findings (OK for none).
func Worst(fs []Finding) Level {
	w := OK
	for _, f := range fs {
		w = max(w, f.Level)
	}
	return w
}
