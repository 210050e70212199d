package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/queue"
	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/test/cluster"
)

// row is one node as the view shows it.
type row struct {
	name, status, zone, reboot string
	boots                      int
	holding                    bool
	hasClaim                   bool
}

// view draws the nodes like `kubectl get nodes` with the reboot state
// added, refreshed in place on a terminal, or as a line per change.
type view struct {
	cp    *cluster.ControlPlane
	s     scenario
	hosts []*cluster.SimHost
	out   io.Writer
	tty   bool
	began time.Time

	last  []row
	lines map[string]string // no-tty: what was last printed per node
	// director, if set, acts on the roll (the steering scenario); its
	// commands show under the table.
	director *director
	paused   string // the cluster's pause, "" when none
	said     []string
}

// until redraws until done says so or ctx ends.
func (v *view) until(ctx context.Context, done func() bool) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := v.snapshot(ctx)
		if err == nil {
			v.last = rows
			v.draw(rows)
			if done() {
				return nil
			}
			if d := v.director; d != nil {
				if err := d.act(ctx, rows); err != nil {
					return err
				}
				v.tell(d)
			}
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (v *view) snapshot(ctx context.Context) ([]row, error) {
	list, err := v.cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	byName := map[string]*corev1.Node{}
	var ours []*corev1.Node
	for i := range list.Items {
		n := &list.Items[i]
		byName[n.Name] = n
	}
	for _, h := range v.hosts {
		if n := byName[h.Name]; n != nil {
			ours = append(ours, n)
		}
	}
	v.paused = ""
	if cm, err := v.cp.Admin.CoreV1().ConfigMaps(steer.Namespace).Get(ctx, steer.Name, metav1.GetOptions{}); err == nil {
		if o, paused := steer.PauseOf(cm.Data); paused {
			v.paused = o.Reason
		}
	}
	now := time.Now()
	tolerance, _ := config.Default().Lock.ClockTolerance()
	q := claim.Eligibility(queue.Participants(ours, now, tolerance), now, 0, nil)
	var rows []row
	for _, h := range v.hosts {
		n := byName[h.Name]
		if n == nil {
			continue
		}
		r := row{name: n.Name, status: nodeStatus(n), zone: n.Labels[zoneLabel], boots: h.Boots()}
		if r.zone == "" {
			r.zone = "-"
		}
		st := claim.State(n.Labels[claim.Label])
		c, _ := claim.Parse(n.Labels[claim.Label], n.Annotations[claim.Annotation])
		r.hasClaim = st != ""
		switch {
		case st == claim.Waiting:
			r.reboot = fmt.Sprintf("waiting #%d", q.Position(n.Name)+1)
			if why := q.Blocked[n.Name]; why != "" {
				r.reboot += " (" + shortWhy(why) + ")"
			} else if v.paused != "" {
				r.reboot += " (paused: keeps its place)"
			}
		case st == claim.Entering:
			r.reboot = "taking a slot"
		case st == claim.Holding:
			r.holding = true
			r.reboot = "holding"
			if c.Phase != "" {
				r.reboot += ": " + string(c.Phase)
			}
		case st != "":
			r.holding = true
			r.reboot = "unreadable claim"
		case h.Boots() > 1:
			r.reboot = "rebooted"
		case n.Labels[steer.HoldLabel] != "":
			o, _ := steer.HoldOf(n)
			r.reboot = "held: " + o.Reason
		case h.RebootRequired():
			r.reboot = "reboot needed"
		default:
			r.reboot = "-"
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// shortWhy keeps the limit's name from a queue reason such as
// "topology.kubernetes.io/zone=eastus-1 is full: 1 of 1 (node)".
func shortWhy(why string) string {
	what, _, _ := strings.Cut(why, " (")
	return strings.Replace(what, "topology.kubernetes.io/zone=", "zone ", 1)
}

// nodeStatus is kubectl's STATUS column.
func nodeStatus(n *corev1.Node) string {
	s := "NotReady"
	if cluster.NodeReady(n) {
		s = "Ready"
	}
	if n.Spec.Unschedulable {
		s += ",SchedulingDisabled"
	}
	return s
}

func (v *view) summaryLine(rows []row) string {
	holding, waiting, done := 0, 0, 0
	perZone := map[string]int{}
	for _, r := range rows {
		switch {
		case r.holding:
			holding++
			perZone[r.zone]++
		case strings.HasPrefix(r.reboot, "waiting"), r.reboot == "taking a slot":
			waiting++
		}
		if r.boots > 1 && !r.hasClaim {
			done++
		}
	}
	line := fmt.Sprintf("slots in use %d/%d", holding, v.s.concurrency)
	if v.s.groupMax > 0 {
		zones := slices.Sorted(func(yield func(string) bool) {
			seen := map[string]bool{}
			for _, r := range rows {
				if !seen[r.zone] && r.zone != "-" {
					seen[r.zone] = true
					if !yield(r.zone) {
						return
					}
				}
			}
		})
		for _, z := range zones {
			line += fmt.Sprintf(" · %s %d/%d", z, perZone[z], v.s.groupMax)
		}
	}
	if v.paused != "" {
		line = "PAUSED (" + v.paused + ") · " + line
	}
	return line + fmt.Sprintf(" · waiting %d · rebooted %d/%d · %s", waiting, done, len(rows), time.Since(v.began).Round(100*time.Millisecond))
}

// tell shows the director's commands: at once as lines, or under the
// table of a view refreshed in place.
func (v *view) tell(d *director) {
	if len(d.said) == 0 {
		return
	}
	if !v.tty {
		for _, s := range d.said {
			fmt.Fprintf(v.out, "%7.1fs  %s\n", time.Since(v.began).Seconds(), strings.ReplaceAll(s, "\n", "\n          "))
		}
	}
	v.said = append(v.said, d.said...)
	d.said = nil
}

func (v *view) draw(rows []row) {
	if v.tty {
		var b strings.Builder
		b.WriteString("\033[H\033[2J" + v.s.title + "\n\n")
		tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTATUS\tZONE\tBOOTS\tREBOOT")
		sorted := slices.Clone(rows)
		if v.s.zones > 0 {
			slices.SortStableFunc(sorted, func(a, b row) int { return strings.Compare(a.zone, b.zone) })
		}
		for _, r := range sorted {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.name, r.status, r.zone, r.boots, r.reboot)
		}
		tw.Flush()
		b.WriteString("\n" + v.summaryLine(rows) + "\n")
		for _, s := range v.said {
			b.WriteString("\n" + s + "\n")
		}
		fmt.Fprint(v.out, b.String())
		return
	}
	if v.lines == nil {
		v.lines = map[string]string{}
	}
	changed := false
	for _, r := range rows {
		line := fmt.Sprintf("%-34s %-28s %-9s %s", r.name, r.status, r.zone, r.reboot)
		if v.lines[r.name] != line {
			v.lines[r.name] = line
			fmt.Fprintf(v.out, "%7.1fs  %s\n", time.Since(v.began).Seconds(), line)
			changed = true
		}
	}
	if changed {
		fmt.Fprintf(v.out, "%7.1fs  %s\n", time.Since(v.began).Seconds(), v.summaryLine(rows))
	}
}

// allDone: every host booted again and no claim is left.
func allDone(hosts []*cluster.SimHost, rows []row) bool {
	if len(rows) != len(hosts) {
		return false
	}
	for i, h := range hosts {
		if h.Boots() < 2 || rows[i].hasClaim {
			return false
		}
	}
	return true
}
