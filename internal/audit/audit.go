// Package audit checks kured-host's invariants over the history of every
// Node revision, in resourceVersion order: the limits, reboots only while
// holding a slot, releases only after a reboot (or an abort that left the
// node as it was), nothing left cordoned. The cluster harness's auditor
// feeds it from an admin watch of a real API server; the simulator from
// its in-memory API.
package audit

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
)

// NodeState is what the auditor records of a Node at one revision.
type NodeState struct {
	RV            uint64
	Seen          time.Time // when the auditor received it
	Node          string
	Deleted       bool
	Labels        map[string]string
	ClaimLabel    string // "" when there is no claim
	Claim         claim.Claim
	ClaimErr      error
	Unschedulable bool
	Ready         bool
	// ReadyMessage is the Ready condition's message: the kubelet's word
	// for why a node is not ready ("node is shutting down" during a
	// graceful node shutdown).
	ReadyMessage string
	BootID       string
	// AdminHeld: the claim is unreadable because an admin wrote it (the
	// simulator knows who wrote what; a watch does not).
	AdminHeld bool
}

// Holding reports whether the node holds a slot at this revision: its claim
// label says holding, or says something unknown (which counts as holding).
// A claim an admin broke by hand (AdminHeld) is not the protocol's doing:
// it does not count as a holder, though its limit binds the nodes that
// see it (CheckCommits).
func (s NodeState) Holding() bool {
	if s.AdminHeld {
		return false
	}
	switch claim.State(s.ClaimLabel) {
	case "", claim.Waiting, claim.Entering:
		return false
	}
	return !s.Deleted
}

// StateOf is n as the audit records it, at revision rv.
func StateOf(n *corev1.Node, rv uint64, deleted bool, seen time.Time) NodeState {
	s := NodeState{
		RV: rv, Seen: seen, Node: n.Name, Deleted: deleted,
		Labels:        maps.Clone(n.Labels),
		ClaimLabel:    n.Labels[claim.Label],
		Unschedulable: n.Spec.Unschedulable,
		Ready:         Ready(n),
		BootID:        n.Status.NodeInfo.BootID,
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			s.ReadyMessage = c.Message
		}
	}
	if s.ClaimLabel != "" || n.Annotations[claim.Annotation] != "" {
		s.Claim, s.ClaimErr = claim.Parse(s.ClaimLabel, n.Annotations[claim.Annotation])
	}
	return s
}

// Ready reports whether a Node's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// History is every recorded revision, in order. Scope, when set, limits
// the checks to the nodes it accepts.
type History struct {
	States []NodeState
	Scope  func(node string) bool
}

// Violation is a broken invariant at a revision.
type Violation struct {
	RV   uint64
	Node string
	What string
}

func (v Violation) String() string { return fmt.Sprintf("rv %d, node %s: %s", v.RV, v.Node, v.What) }

// Errors joins violations into one error (nil when there are none).
func Errors(all []Violation) error {
	if len(all) == 0 {
		return nil
	}
	lines := make([]string, 0, len(all))
	for _, v := range all {
		lines = append(lines, v.String())
	}
	return fmt.Errorf("%d invariant violation(s):\n  %s", len(all), strings.Join(lines, "\n  "))
}

// Check runs every check of the protocol's safety.
func (h History) Check(limits claim.Limits) []Violation {
	var all []Violation
	all = append(all, h.CheckLimits(limits)...)
	all = append(all, h.CheckPublishedLimits()...)
	all = append(all, h.CheckRebootsHeld()...)
	all = append(all, h.CheckReleases()...)
	all = append(all, h.CheckNotLeftCordoned()...)
	return all
}

// walk calls f after each recorded change with the state of every node at
// that revision, and the previous state of the node that changed.
func (h History) walk(f func(cur map[string]NodeState, changed NodeState, prev NodeState, hadPrev bool)) {
	cur := map[string]NodeState{}
	for _, s := range h.States {
		if h.Scope != nil && !h.Scope(s.Node) {
			continue
		}
		prev, had := cur[s.Node]
		if s.Deleted {
			delete(cur, s.Node)
		} else {
			cur[s.Node] = s
		}
		f(cur, s, prev, had)
	}
}

// CheckLimits: at every revision, no more holders than limits.Concurrency
// in the cluster, and no more than each group's max among nodes with the
// same value of the group's label (nodes without the label are not
// counted in that group).
func (h History) CheckLimits(limits claim.Limits) []Violation {
	var out []Violation
	h.walk(func(cur map[string]NodeState, s NodeState, _ NodeState, _ bool) {
		var holders []string
		for name, st := range cur {
			if st.Holding() {
				holders = append(holders, name)
			}
		}
		slices.Sort(holders)
		if len(holders) > limits.Concurrency {
			out = append(out, Violation{s.RV, s.Node, fmt.Sprintf("%d holders %v, limit %d", len(holders), holders, limits.Concurrency)})
		}
		for _, g := range limits.Groups {
			per := map[string][]string{}
			for _, name := range holders {
				if v, ok := cur[name].Labels[g.Label]; ok {
					per[v] = append(per[v], name)
				}
			}
			for v, names := range per {
				if len(names) > g.Max {
					out = append(out, Violation{s.RV, s.Node, fmt.Sprintf("%d holders %v in %s=%s, limit %d", len(names), names, g.Label, v, g.Max)})
				}
			}
		}
	})
	return out
}

// CheckRebootsHeld: a node's boot ID changes only while it holds a slot.
func (h History) CheckRebootsHeld() []Violation {
	var out []Violation
	h.walk(func(_ map[string]NodeState, s NodeState, prev NodeState, had bool) {
		if had && !s.Deleted && prev.BootID != "" && s.BootID != prev.BootID && !prev.Holding() {
			out = append(out, Violation{s.RV, s.Node, fmt.Sprintf("rebooted (boot %s -> %s) without holding a slot (claim %q)", short(prev.BootID), short(s.BootID), prev.ClaimLabel)})
		}
	})
	return out
}

// CheckReleases: a holder gives up its claim only after a reboot (a boot ID
// other than the one it held the slot in), or after recording that it
// aborted before rebooting with the node back as it found it; a deleted
// Node takes its claim with it.
func (h History) CheckReleases() []Violation {
	var out []Violation
	heldIn := map[string]string{} // node -> boot ID when it became holding
	h.walk(func(_ map[string]NodeState, s NodeState, prev NodeState, had bool) {
		if s.Deleted {
			delete(heldIn, s.Node)
			return
		}
		if s.Holding() {
			if !had || !prev.Holding() {
				heldIn[s.Node] = s.BootID
			}
			return
		}
		if !had || !prev.Holding() {
			return
		}
		defer delete(heldIn, s.Node)
		switch {
		case s.BootID != heldIn[s.Node]:
		case prev.Claim.Phase == claim.PhaseAborted && prev.Unschedulable == prev.Claim.WasUnschedulable:
		default:
			out = append(out, Violation{s.RV, s.Node, fmt.Sprintf("released the slot in the boot it took it in (%s), phase %q, without aborting", short(s.BootID), prev.Claim.Phase)})
		}
	})
	return out
}

// CheckNotLeftCordoned: a node that kured-host cordoned (it became
// unschedulable while holding, and the claim says it was schedulable
// before) is schedulable again once it no longer takes part.
func (h History) CheckNotLeftCordoned() []Violation {
	cordoned := map[string]uint64{}
	last := map[string]NodeState{}
	h.walk(func(_ map[string]NodeState, s NodeState, prev NodeState, had bool) {
		last[s.Node] = s
		switch {
		case s.Deleted, !s.Unschedulable:
			delete(cordoned, s.Node)
		case had && !prev.Unschedulable && s.Holding() && !s.Claim.WasUnschedulable:
			cordoned[s.Node] = s.RV
		}
	})
	var out []Violation
	for node, rv := range cordoned {
		if st := last[node]; st.ClaimLabel == "" {
			out = append(out, Violation{rv, node, "cordoned by kured-host (at this revision) and left cordoned after giving up its claim"})
		}
	}
	slices.SortFunc(out, func(x, y Violation) int { return int(x.RV) - int(y.RV) })
	return out
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// CheckPublishedLimits is the protocol's own safety claim: at every
// revision, no holder is in a domain (the cluster, or a group of its
// published rules, on its recorded or current label values) with more
// holders than the limit it published. With nodes configured differently
// this is stricter than any single limit.
func (h History) CheckPublishedLimits() []Violation {
	var out []Violation
	h.walk(func(cur map[string]NodeState, s NodeState, _ NodeState, _ bool) {
		var holders []NodeState
		for _, st := range cur {
			if st.Holding() {
				holders = append(holders, st)
			}
		}
		for _, h := range holders {
			if h.ClaimErr != nil {
				continue
			}
			if n := len(holders); n > h.Claim.Limits.Concurrency {
				out = append(out, Violation{s.RV, h.Node, fmt.Sprintf("%d holders; it published concurrency %d", n, h.Claim.Limits.Concurrency)})
			}
			for _, g := range h.Claim.Limits.Groups {
				for _, v := range groupValues(h, g.Label) {
					n := 0
					for _, o := range holders {
						if slices.Contains(groupValues(o, g.Label), v) {
							n++
						}
					}
					if n > g.Max {
						out = append(out, Violation{s.RV, h.Node, fmt.Sprintf("%d holders in %s=%s; it published %d", n, g.Label, v, g.Max)})
					}
				}
			}
		}
	})
	return out
}

// groupValues are the values of label a node counts under: recorded in
// its claim and current.
func groupValues(s NodeState, label string) []string {
	var vs []string
	if v, ok := s.Claim.Groups[label]; ok {
		vs = append(vs, v)
	}
	if v, ok := s.Labels[label]; ok && !slices.Contains(vs, v) {
		vs = append(vs, v)
	}
	return vs
}

// Acquisition is one slot taken and given back.
type Acquisition struct {
	Node               string
	Held, Released     NodeState // the revisions where the claim became holding and went away
	ReleasedOK         bool      // false while still holding
	BootHeld, BootLeft string
}

// Acquisitions lists every slot taken, in the order taken.
func (h History) Acquisitions() []Acquisition {
	var out []Acquisition
	open := map[string]int{}
	h.walk(func(_ map[string]NodeState, s NodeState, prev NodeState, had bool) {
		wasHolding := had && prev.Holding()
		switch {
		case s.Holding() && !wasHolding:
			open[s.Node] = len(out)
			out = append(out, Acquisition{Node: s.Node, Held: s, BootHeld: s.BootID})
		case !s.Holding() && wasHolding:
			if i, ok := open[s.Node]; ok {
				out[i].Released, out[i].ReleasedOK, out[i].BootLeft = s, true, s.BootID
				delete(open, s.Node)
			}
		}
	})
	return out
}

// MaxHolders is the most holders seen at once in the cluster, and in any
// one value of label (if label is not "").
func (h History) MaxHolders(label string) (cluster, group int) {
	h.walk(func(cur map[string]NodeState, _ NodeState, _ NodeState, _ bool) {
		n := 0
		per := map[string]int{}
		for _, st := range cur {
			if st.Holding() {
				n++
				if v, ok := st.Labels[label]; ok && label != "" {
					per[v]++
				}
			}
		}
		cluster = max(cluster, n)
		for _, c := range per {
			group = max(group, c)
		}
	})
	return cluster, group
}

// CheckCommits is the promise of the limits with mixed configurations:
// when a node takes a slot (becomes holding), the holders are within the
// smallest limit published by every claim it could see, in every domain
// it is in: the claims, waiting or active, that were there from before it
// announced until it committed (its verify read came in between). A claim
// that cannot be read counts with concurrency 1 when its label is active,
// and not at all when it says waiting, as the lock counts it. Limits set
// by a claim that joined later do not bind a node that had committed.
func (h History) CheckCommits() []Violation {
	var out []Violation
	since := map[string]uint64{}     // node -> revision its current claim appeared
	announced := map[string]uint64{} // node -> revision it last became entering
	h.walk(func(cur map[string]NodeState, s NodeState, prev NodeState, had bool) {
		switch {
		case s.Deleted || s.ClaimLabel == "":
			delete(since, s.Node)
			delete(announced, s.Node)
			return
		case !had || prev.ClaimLabel == "":
			since[s.Node] = s.RV
		}
		if claim.State(s.ClaimLabel) == claim.Entering && (!had || claim.State(prev.ClaimLabel) != claim.Entering) {
			announced[s.Node] = s.RV
		}
		if !s.Holding() || (had && prev.Holding()) {
			return
		}
		from, ok := announced[s.Node]
		if !ok {
			from = s.RV
		}
		var limits []claim.Limits
		var bound []NodeState
		for name, st := range cur {
			if st.ClaimLabel == "" || (since[name] > from && name != s.Node) {
				continue
			}
			switch {
			case st.ClaimErr == nil:
				limits = append(limits, st.Claim.Limits)
			case claim.State(st.ClaimLabel) == claim.Waiting:
				continue
			default:
				limits = append(limits, claim.Limits{Concurrency: 1})
			}
			bound = append(bound, st)
		}
		var holders []NodeState
		for _, st := range cur {
			if st.Holding() {
				holders = append(holders, st)
			}
		}
		if lim, i := claim.Strictest("", limits); i >= 0 && len(holders) > lim {
			out = append(out, Violation{s.RV, s.Node, fmt.Sprintf("took a slot with %d holders; the strictest concurrency it could see is %d (%s)", len(holders), lim, bound[i].Node)})
		}
		labels := map[string]bool{}
		for _, l := range limits {
			for _, g := range l.Groups {
				labels[g.Label] = true
			}
		}
		for _, label := range slices.Sorted(maps.Keys(labels)) {
			for _, v := range groupValues(s, label) {
				var in []claim.Limits
				for i, st := range bound {
					if slices.Contains(groupValues(st, label), v) {
						in = append(in, limits[i])
					}
				}
				lim, i := claim.Strictest(label, in)
				if i < 0 {
					continue
				}
				n := 0
				for _, st := range holders {
					if slices.Contains(groupValues(st, label), v) {
						n++
					}
				}
				if n > lim {
					out = append(out, Violation{s.RV, s.Node, fmt.Sprintf("took a slot with %d holders in %s=%s; the strictest limit there it could see is %d", n, label, v, lim)})
				}
			}
		}
	})
	return out
}
