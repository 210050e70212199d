package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/test/cluster"
)

// result is what a roll showed, from the auditor's record of every Node
// revision.
type result struct {
	s        scenario
	makespan time.Duration
	perNode  time.Duration // mean time a node held its slot
	ideal    time.Duration
	// Most nodes holding a slot at once, in the cluster and in one zone;
	// most nodes NotReady at once.
	maxHolders, maxZone, maxNotReady int
	rebootedOnce                     int
	claims                           []string // "node: JSON" while holding, in the order taken
	extra                            []string // the scenario's own lines
	problems                         []string
}

func summarize(s scenario, a *cluster.Auditor, hosts []*cluster.SimHost, began, end time.Time) *result {
	r := &result{s: s, makespan: end.Sub(began)}
	if err := a.Check(s.limits()); err != nil {
		r.problems = append(r.problems, err.Error())
	}
	acq := a.Acquisitions()
	held := map[string]int{}
	var total time.Duration
	for _, q := range acq {
		held[q.Node]++
		if q.ReleasedOK {
			total += q.Released.Seen.Sub(q.Held.Seen)
		}
	}
	if len(acq) > 0 {
		r.perNode = total / time.Duration(len(acq))
	}
	for _, h := range hosts {
		switch {
		case h.Boots() == 2 && held[h.Name] == 1:
			r.rebootedOnce++
		default:
			r.problems = append(r.problems, fmt.Sprintf("%s booted %d times and held a slot %d times, want a reboot and a slot exactly once", h.Name, h.Boots()-1, held[h.Name]))
		}
	}
	r.maxHolders, r.maxZone = a.MaxHolders(zoneLabel)
	// The ideal: rounds of k nodes (of groupMax per zone), each taking
	// the measured time per node.
	rounds := int(math.Ceil(float64(s.nodes) / float64(s.concurrency)))
	if s.groupMax > 0 && s.zones > 0 {
		perZone := int(math.Ceil(float64(s.nodes) / float64(s.zones)))
		rounds = max(rounds, int(math.Ceil(float64(perZone)/float64(s.groupMax))))
	}
	r.ideal = time.Duration(rounds) * r.perNode

	ready := map[string]bool{}
	shown := map[string]bool{}
	for _, st := range a.History() {
		if a.Scope != nil && !a.Scope(st.Node) {
			continue
		}
		ready[st.Node] = st.Ready
		down := 0
		for _, ok := range ready {
			if !ok {
				down++
			}
		}
		r.maxNotReady = max(r.maxNotReady, down)
		// The claim as it stood when the reboot was asked for: holding,
		// with the boot ID that must change before the slot is freed.
		if st.ClaimLabel == string(claim.Holding) && st.Claim.Phase == claim.PhaseRebooting && !shown[st.Node] {
			shown[st.Node] = true
			if js, err := st.Claim.Marshal(); err == nil {
				r.claims = append(r.claims, st.Node+": "+js)
			}
		}
	}
	return r
}

func (r *result) print(out io.Writer) {
	s := r.s
	fmt.Fprintf(out, "\nEach node's claim (annotation %s) when it asked for its reboot:\n", claim.Annotation)
	for _, c := range r.claims {
		fmt.Fprintln(out, "  "+c)
	}
	fmt.Fprintf(out, "\nSummary of %q:\n", s.name)
	fmt.Fprintf(out, "  rebooted exactly once:        %d/%d nodes\n", r.rebootedOnce, s.nodes)
	fmt.Fprintf(out, "  most nodes holding a slot:    %d (limit %d)\n", r.maxHolders, s.concurrency)
	if s.groupMax > 0 && s.zones > 0 {
		fmt.Fprintf(out, "  most in one zone at once:     %d (limit %d)\n", r.maxZone, s.groupMax)
	}
	fmt.Fprintf(out, "  most nodes NotReady at once:  %d\n", r.maxNotReady)
	ratio := 0.0
	if r.ideal > 0 {
		ratio = float64(r.makespan) / float64(r.ideal)
	}
	fmt.Fprintf(out, "  makespan:                     %s; ideal %s (%s per node × %d rounds), ratio %.2f\n",
		r.makespan.Round(100*time.Millisecond), r.ideal.Round(100*time.Millisecond), r.perNode.Round(100*time.Millisecond),
		int(math.Round(float64(r.ideal)/math.Max(float64(r.perNode), 1))), ratio)
	for _, e := range r.extra {
		fmt.Fprintln(out, "  "+e)
	}
	if len(r.problems) == 0 {
		fmt.Fprintln(out, "  auditor:                      no violation (limits, reboots before release, nothing left cordoned)")
		return
	}
	fmt.Fprintf(out, "  PROBLEMS:\n    %s\n", strings.Join(r.problems, "\n    "))
}
