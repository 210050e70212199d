package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/steer"
)

// Render writes the report for a person: the table of participating
// nodes, the summary line, the limits in force and the call-outs. Every
// string that comes from a claim or a Node (another node's, which may be
// forged) is made printable first: a cell is quoted, a line has its
// control characters escaped, so nothing reaches the terminal as an
// escape sequence or breaks the table.
func Render(w io.Writer, r Report) error {
	var b strings.Builder
	switch {
	case r.Paused != nil:
		b.WriteString(host.Escape("PAUSED: "+orderText(*r.Paused)+"; no node takes a slot until kured-host resume") + "\n\n")
	case r.PauseError != "":
		b.WriteString("! " + host.Escape(r.PauseError) + "\n\n")
	}
	if len(r.Nodes) == 0 {
		fmt.Fprintf(&b, "no node takes part: none is waiting for or holding a reboot slot (%d %s)\n", r.NodesTotal, plural(r.NodesTotal, "node", "nodes"))
	} else {
		table(&b, r)
		b.WriteString("\n" + host.Escape(summaryLine(r)) + "\n")
	}
	b.WriteString(host.Escape(limitsLine(r)) + "\n")
	if r.Self != "" {
		b.WriteString(host.Escape(fmt.Sprintf("this node: %s%s", field(r.Self), selfState(r))) + "\n")
	}
	for _, h := range r.Held {
		b.WriteString(host.Escape(fmt.Sprintf("held: %s, %s (kured-host unhold %s)", field(h.Node), orderText(h.Order), field(h.Node))) + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("! " + host.Escape(n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// orderText reads "since 2026-12-01 10:00 UTC by alice: freeze", as
// the daemon's messages do.
func orderText(o Order) string {
	so := steer.Order{Reason: o.Reason, By: o.By}
	if o.Since != nil {
		so.Since = *o.Since
	}
	return so.String()
}

// JSON writes the report as one indented JSON document (docs/status.md).
func JSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func table(b *strings.Builder, r Report) {
	tw := tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
	head := []string{"NODE"}
	for _, l := range r.GroupLabels {
		head = append(head, field(strings.ToUpper(columnName(l, r.GroupLabels))))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "STATE", "PHASE", "SINCE", "QUEUE", "HOLDING", "BLOCKED-BY"), "\t"))
	for _, n := range r.Nodes {
		row := []string{field(n.Name)}
		for _, l := range r.GroupLabels {
			row = append(row, dash(field(n.Groups[l])))
		}
		row = append(row, field(n.State), dash(phase(n)), dash(ageOf(n.Since != nil, n.SinceSeconds)))
		queue := ""
		if n.Queue > 0 {
			queue = strconv.Itoa(n.Queue)
		}
		row = append(row, dash(queue), dash(ageOf(n.Acquired != nil, n.HoldingSeconds)), dash(host.Escape(blockedBy(n))))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}

// columnName is a group label's column: its last path element, unless
// two labels share it.
func columnName(label string, all []string) string {
	for _, o := range all {
		if o != label && short(o) == short(label) {
			return label
		}
	}
	return short(label)
}

func phase(n Node) string {
	p := field(n.Phase)
	if n.Active && !n.Ready {
		p = strings.TrimSpace(p + " (NotReady)")
	}
	if n.TTLExpired {
		p = strings.TrimSpace(p + " (past ttl)")
	}
	return p
}

func blockedBy(n Node) string {
	switch {
	case n.State != StateWaiting:
		return ""
	case n.Eligible && n.BlockedBy == "":
		return "nothing: eligible, about to announce"
	}
	return n.BlockedBy
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ageOf(known bool, secs int64) string {
	if !known {
		return ""
	}
	return age(time.Duration(secs) * time.Second)
}

// age is a short duration for a table: "45s", "5m30s", "2h10m", "3d4h".
func age(d time.Duration) string {
	d = d.Truncate(time.Second)
	s, m, h := int(d.Seconds()), int(d.Minutes()), int(d.Hours())
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", s)
	case d < 10*time.Minute && s%60 != 0:
		return fmt.Sprintf("%dm%ds", m, s%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", m)
	case d < 8*time.Hour && m%60 != 0:
		return fmt.Sprintf("%dh%dm", h, m%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", h)
	case d < 8*24*time.Hour && h%24 != 0:
		return fmt.Sprintf("%dd%dh", h/24, h%24)
	}
	return fmt.Sprintf("%dd", h/24)
}

// summaryLine: "holding 2/2 · zone-a 1/1 · zone-b 1/1 · waiting 5 · alarms 0".
func summaryLine(r Report) string {
	s := r.Summary
	hold := "holding " + fraction(s.Active, s.Max)
	var detail []string
	if s.Entering > 0 {
		detail = append(detail, fmt.Sprintf("%d entering", s.Entering))
	}
	if s.Unreadable > 0 {
		detail = append(detail, fmt.Sprintf("%d unreadable", s.Unreadable))
	}
	if len(detail) > 0 {
		hold += " (" + strings.Join(detail, ", ") + ")"
	}
	parts := []string{hold}
	for _, d := range r.Domains[1:] {
		name := d.Value
		if len(r.GroupLabels) > 1 {
			name = columnName(d.Label, r.GroupLabels) + "=" + d.Value
		}
		parts = append(parts, field(name)+" "+fraction(len(d.Active), d.Max))
	}
	parts = append(parts, fmt.Sprintf("waiting %d", s.Waiting), fmt.Sprintf("alarms %d", s.Alarms))
	return strings.Join(parts, " · ")
}

func fraction(n, lim int) string {
	if lim == 0 {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%d/%d", n, lim)
}

// limitsLine says each rule's limit in force and where it comes from.
func limitsLine(r Report) string {
	var parts []string
	for _, l := range r.Limits {
		name, per := "concurrency", ""
		if l.Label != "" {
			name, per = field(l.Label), " per value"
		}
		if l.Max == 0 {
			parts = append(parts, name+" none")
			continue
		}
		p := fmt.Sprintf("%s %d%s (%s", name, l.Max, per, l.From)
		if l.Kind == FromNode && r.Config.File != "" && l.Config != l.Max {
			if l.Config == 0 {
				p += "; this configuration has no such rule"
			} else {
				p += fmt.Sprintf("; this configuration: %d", l.Config)
			}
		}
		parts = append(parts, p+")")
	}
	return "limits: " + strings.Join(parts, " · ")
}

func selfState(r Report) string {
	for _, n := range r.Nodes {
		if n.Name != r.Self {
			continue
		}
		switch {
		case n.Queue > 0:
			return fmt.Sprintf(", %s, place %d in the queue", n.State, n.Queue)
		default:
			return ", " + n.State
		}
	}
	return ", not taking part (no reboot pending)"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// field is a string from a claim or a Node as one value in the output: as
// it is when it is printable, else in Go quotes with its control
// characters escaped (and so without a tab or a newline to break the
// table).
func field(s string) string {
	if host.Escape(s) == s {
		return s
	}
	return strconv.Quote(s)
}
