// Package queue decides where a waiting node stands in the herd-free
// queue (docs/claims.md, "The third design"): its class, whether it is in
// its class's front, and which node it follows when it is not. It does
// no I/O and reads no clock: the lock gives it what its watches and reads
// showed, and does what it answers.
package queue

import (
	"slices"
	"strings"

	"github.com/kured-host/kured-host/daemon/claim"
)

// Labels of the queue, written by each node on its own Node only.
const (
	// FrontLabel marks a waiting node of its class's front: RoleIn or
	// RoleEdge. It stays on through the announce and the slot, so that
	// the front's watchers see the node go from waiting to active in one
	// event; the release removes it.
	FrontLabel = "kured-host.dev/front"
	// StoppedLabel marks a waiting node whose daemon stopped (the unit's
	// ExecStopPost writes it, the daemon removes it when it starts): it is
	// passed over at once, as a NotReady node is.
	StoppedLabel = "kured-host.dev/stopped"
)

// Role is a waiting node's place with respect to its class's front.
type Role string

const (
	// RoleBehind is behind the edge: the node follows its predecessor and
	// carries no FrontLabel.
	RoleBehind Role = ""
	// RoleIn is one of the first Width live members of the class: it may
	// be admitted, and watches the active claims and the front.
	RoleIn Role = "in"
	// RoleEdge is the live member after those: it cannot be admitted yet,
	// watches as RoleIn does, and moves in when a member ahead goes.
	RoleEdge Role = "edge"
)

// RoleOf reads a Node's FrontLabel; a value this version does not know
// counts as RoleEdge, which admits nothing and keeps the node watched.
func RoleOf(labels map[string]string) Role {
	v, ok := labels[FrontLabel]
	switch {
	case !ok:
		return RoleBehind
	case Role(v) == RoleIn:
		return RoleIn
	default:
		return RoleEdge
	}
}

// Class is the set of waiting nodes that go in queue order: the same
// published limits and the same values of every label those limits name.
type Class struct {
	Digest string       // claim.LimitsDigest of the published limits
	Values []LabelValue // in the order of the limits' group rules
}

// LabelValue is a node's value of one group rule's label (Set is false
// when the node does not have that label) and the value its claim
// recorded when it joined (Recorded false: none). A node relabelled while
// waiting is in the domains of both, as the rules count it.
type LabelValue struct {
	Label, Value, RecordedValue string
	Set, Recorded               bool
}

// in reports whether the node is in some domain of the label's rule.
func (v LabelValue) in() bool { return v.Set || v.Recorded }

// ClassOf is p's class: its claim's published limits, and the values of
// the labels they name, its Node's and its claim's.
func ClassOf(p claim.Participant) Class {
	c := Class{Digest: claim.LimitsDigest(p.Claim.Limits)}
	for _, g := range p.Claim.Limits.Groups {
		if slices.ContainsFunc(c.Values, func(v LabelValue) bool { return v.Label == g.Label }) {
			continue
		}
		v, ok := p.Labels[g.Label]
		rv, rok := p.Claim.Groups[g.Label]
		c.Values = append(c.Values, LabelValue{Label: g.Label, Value: v, Set: ok, RecordedValue: rv, Recorded: rok})
	}
	return c
}

// Equal reports whether two classes are the same.
func (c Class) Equal(o Class) bool { return c.Digest == o.Digest && slices.Equal(c.Values, o.Values) }

// Names reports whether label is one of the labels the class's rules name.
func (c Class) Names(label string) bool {
	return slices.ContainsFunc(c.Values, func(v LabelValue) bool { return v.Label == label })
}

// Selector selects the waiting members of the class, for a label
// selector (and the nodes that recorded other values when they joined,
// which the reader leaves out); the lock adds the span of waiting-since it
// reads.
func (c Class) Selector() string {
	terms := []string{claim.Label + "=" + string(claim.Waiting), claim.LimitsLabel + "=" + c.Digest}
	for _, v := range c.Values {
		if v.Set {
			terms = append(terms, v.Label+"="+v.Value)
		} else {
			terms = append(terms, "!"+v.Label)
		}
	}
	return strings.Join(terms, ",")
}

// Width is how many members of a class publishing l can be admitted at
// once: the smallest of its concurrency and the maxima of its groups whose
// domains its members are in, at least 1 (a claim that publishes less
// cannot be read).
func (c Class) Width(l claim.Limits) int {
	w := l.Concurrency
	for _, g := range l.Groups {
		if i := slices.IndexFunc(c.Values, func(v LabelValue) bool { return v.Label == g.Label }); i >= 0 && c.Values[i].in() {
			w = min(w, g.Max)
		}
	}
	return max(w, 1)
}
