package queue

import (
	"slices"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// The entering node (docs/claims.md, "The protocol for node n", steps 3
// to 5): after its announce, it verifies from a consistent read and
// commits, stays entering or steps back. An Entrant decides each move
// from what one verify read; its shell does the reads and the writes.
const (
	// MinStepBack and MaxStepBack bound the back-off of a node that steps
	// back, doubled each time in a row.
	MinStepBack = 200 * time.Millisecond
	MaxStepBack = 5 * time.Second
	// GiveWayAfter: entering claims behind this one step back when they
	// verify; if they stay this long, their daemons are gone, and they
	// keep their units, so this one gives way.
	GiveWayAfter = 5 * time.Second
	// StayLook is how long an entering node that stays waits for a change
	// before it verifies again.
	StayLook = 250 * time.Millisecond
)

// EnterMove is what an entering node does after a verify.
type EnterMove int8

const (
	// EnterCommit: take the slot (the commit write).
	EnterCommit EnterMove = iota
	// EnterStepBack: back to waiting, in its place; after Wait, wait for
	// its turn again.
	EnterStepBack
	// EnterStay: verify again after Wait or a change.
	EnterStay
	// EnterReread: read the own Node whole, then verify again.
	EnterReread
	// EnterRefuse: back to waiting, in its place, and give up this
	// acquisition: an operator said no (Reason).
	EnterRefuse
)

func (m EnterMove) String() string {
	return [...]string{"commit", "step back", "stay", "read its own Node", "refuse"}[m]
}

// EnterAction is an entering node's next move: what, why, and how long
// to wait after it (before jitter).
type EnterAction struct {
	Move   EnterMove
	Reason string
	Wait   time.Duration
}

// Verified is what one verify read.
type Verified struct {
	// Now is this host's clock: how long the node has stayed.
	Now time.Time
	// Server is the API server's clock as this host estimates it: the
	// others' ages.
	Server time.Time
	// Announced: the read has the entering claim this daemon announced
	// (the same Node, label and annotation). A claim edited under the
	// daemon is never committed on.
	Announced bool
	// Whole: the read's version of the own Node is the one last read
	// whole. The commit cordons on it, and whether the node is
	// unschedulable already is known only of that version.
	Whole bool
	// Held is the operator's hold on the read's version of the own Node,
	// nil if none: the commit is conditional on that version.
	Held error
	// Own is this node's configuration.
	Own claim.Limits
	// Snap is every claim that binds this node, itself included, as read,
	// with the readiness this node knows.
	Snap []claim.Participant
	TTL  time.Duration
	// Silent says which waiting nodes the front passes over (Yield).
	Silent func(name string) bool
}

// Entrant is what an entering node remembers between the verifies of one
// announce: the back-off, and since when it stays.
type Entrant struct {
	Node         string
	backoff      time.Duration
	stayingSince time.Time
}

// NewEntrant is the node's memory at its first verify.
func NewEntrant(node string) *Entrant { return &Entrant{Node: node, backoff: MinStepBack} }

// Waiting tells the Entrant that the claim is waiting again: a stay
// counts from the next announce.
func (e *Entrant) Waiting() { e.stayingSince = time.Time{} }

// Verified decides from one verify's read. The read must be of the claim
// announced, at a version read whole and not held; then claim.Verify
// decides, and a node that may go gives way to a waiting node whose turn
// it is (claim.Yield: stepping back is always safe). A step back waits a
// back-off doubled each time in a row; a stay that lasts GiveWayAfter
// becomes a step back (the claims it waits for are dead).
func (e *Entrant) Verified(v Verified) EnterAction {
	switch {
	case !v.Announced:
		return EnterAction{Move: EnterReread, Reason: "its own claim changed under it"}
	case !v.Whole:
		return EnterAction{Move: EnterReread, Reason: "reading its own Node"}
	case v.Held != nil:
		return e.Checked(v.Held)
	}
	var me claim.Participant
	if i := slices.IndexFunc(v.Snap, func(p claim.Participant) bool { return p.Name == e.Node }); i >= 0 {
		me = v.Snap[i]
	}
	verdict := claim.Verify(me, v.Own, v.Snap, v.Server, v.TTL)
	if verdict.Decision != claim.StepBack {
		if yield, why := claim.Yield(me, v.Snap, v.Server, v.TTL, v.Silent); yield {
			verdict = claim.Verdict{Decision: claim.StepBack, Reason: why}
		}
	}
	switch verdict.Decision {
	case claim.Commit:
		e.backoff, e.stayingSince = MinStepBack, time.Time{}
		return EnterAction{Move: EnterCommit}
	case claim.StepBack:
		wait := e.backoff
		e.backoff, e.stayingSince = min(2*e.backoff, MaxStepBack), time.Time{}
		return EnterAction{Move: EnterStepBack, Reason: verdict.Reason, Wait: wait}
	}
	if e.stayingSince.IsZero() {
		e.stayingSince = v.Now
	}
	if v.Now.Sub(e.stayingSince) > GiveWayAfter {
		e.stayingSince = time.Time{}
		return EnterAction{Move: EnterStepBack, Reason: verdict.Reason + "; they have not stepped back"}
	}
	return EnterAction{Move: EnterStay, Reason: verdict.Reason, Wait: StayLook}
}

// Checked decides from the last look before a commit (an operator's
// hold or pause, a blocker): a no steps back and gives up.
func (e *Entrant) Checked(no error) EnterAction {
	if no != nil {
		return EnterAction{Move: EnterRefuse, Reason: no.Error()}
	}
	return EnterAction{Move: EnterCommit}
}

// Publish is what a node publishes when it announces: the stricter of its
// configuration own and what its claim published before, prev (a
// restarted daemon with a laxer configuration keeps its published limits
// until it releases). Its rules and the claim's together stay within
// claim.MaxGroupRules; past that, it publishes concurrency 1, which is no
// less strict than any of them.
func Publish(own, prev claim.Limits) claim.Limits {
	out := claim.Limits{Concurrency: own.Concurrency, Groups: slices.Clone(own.Groups)}
	if prev.Concurrency > 0 && prev.Concurrency < out.Concurrency {
		out.Concurrency = prev.Concurrency
	}
	for _, g := range prev.Groups {
		i := slices.IndexFunc(out.Groups, func(o claim.GroupLimit) bool { return o.Label == g.Label })
		switch {
		case i < 0:
			out.Groups = append(out.Groups, g)
		case g.Max < out.Groups[i].Max:
			out.Groups[i].Max = g.Max
		}
	}
	if len(out.Groups) > claim.MaxGroupRules {
		return claim.Limits{Concurrency: 1, Groups: slices.Clone(own.Groups)}
	}
	return out
}
