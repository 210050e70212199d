package queue

import (
	"slices"
	"strconv"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// Live reports whether a waiting node counts in its class's order: its
// Node is Ready, its daemon has not marked itself stopped, and the front
// has not passed it over as silent (silent may be nil: no one is).
func Live(p claim.Participant, silent func(name string) bool) bool {
	if !p.Ready {
		return false
	}
	if _, stopped := p.Labels[StoppedLabel]; stopped {
		return false
	}
	return silent == nil || !silent(p.Name)
}

// member reports whether p is a readable waiting claim of class c.
func member(p claim.Participant, c Class) bool {
	return p.Err == nil && p.Claim.State == claim.Waiting && ClassOf(p).Equal(c)
}

// Standing is where self stands in the front from a view of it (the
// active claims and the front, as a node of the front watches them): how
// many members of its class ahead of it count, and the role that gives.
// counts says which members count: the live ones, but not those the view
// shows blocked only in a domain of a rule the class does not name, which
// hold no one behind them back. The edge reaches one place further back
// than its definition, so that a member that comes into the front ahead
// of it (its daemon restarted, its Node Ready again) does not send it
// back to following and then forward again.
func Standing(self claim.Participant, view []claim.Participant, counts func(claim.Participant) bool) (Role, int) {
	c, ahead := ClassOf(self), 0
	for _, p := range view {
		if p.Name != self.Name && member(p, c) && claim.QueueOrder(p, self) < 0 && counts(p) {
			ahead++
		}
	}
	switch w := c.Width(self.Claim.Limits); {
	case ahead < w:
		return RoleIn, ahead
	case ahead <= w+1:
		return RoleEdge, ahead
	default:
		return RoleBehind, ahead
	}
}

// Ahead lists the live members of self's class ahead of it among those
// a read found, nearest first: the first is its predecessor, the rest
// whom it follows next if that one cannot go. A member that cannot go
// (NotReady, stopped) is no one's predecessor: the node behind it
// follows the next one ahead, or enters the front when there is none.
func Ahead(self claim.Participant, found []claim.Participant) []claim.Participant {
	c := ClassOf(self)
	var ahead []claim.Participant
	for _, p := range found {
		if p.Name != self.Name && member(p, c) && Live(p, nil) && claim.QueueOrder(p, self) < 0 {
			ahead = append(ahead, p)
		}
	}
	slices.SortFunc(ahead, func(a, b claim.Participant) int { return claim.QueueOrder(b, a) })
	return ahead
}

// Move is what a node behind the edge does after its predecessor changed.
type Move int

const (
	// Stay: keep following the predecessor.
	Stay Move = iota
	// Find: the predecessor left the class ahead of this node; read the
	// class again for the nearest member ahead.
	Find
	// Enter: start the front's watches, as RoleEdge, and take the role
	// that Standing gives from them.
	Enter
)

func (m Move) String() string {
	switch m {
	case Stay:
		return "stay"
	case Find:
		return "find"
	default:
		return "enter"
	}
}

// Follow decides for self, behind the edge, from its predecessor as its
// watch shows it (gone: the Node was deleted). A predecessor that left
// the queue, moved to another class, joined again behind self or can no
// longer go (NotReady, stopped) is no longer one: find the next. One that
// is in puts self at the front's edge or nearer, and so does one that
// announced from the front (its label in): the members still waiting
// ahead of it without a front label are ones the front passed over (a
// daemon that hangs), which self would otherwise follow until its
// resync, each node behind them in turn.
func Follow(self claim.Participant, pred claim.Participant, gone bool) Move {
	switch {
	case gone:
		return Find
	case pred.Err == nil && pred.Claim.State.Active() && RoleOf(pred.Labels) == RoleIn:
		return Enter
	case !member(pred, ClassOf(self)) || claim.QueueOrder(pred, self) >= 0 || !Live(pred, nil):
		return Find
	case RoleOf(pred.Labels) == RoleIn:
		return Enter
	default:
		return Stay
	}
}

// spans are the widths of the reads that look for a predecessor: a roll's
// joins come within two minutes of each other, tens a second at 5,000
// nodes, so the first two spans nearly always hold one, and the first
// holds a few claims however dense the joins; the last read has no
// lower bound.
var spans = []time.Duration{250 * time.Millisecond, 2 * time.Second, 30 * time.Second, 8 * time.Minute}

// SpanSelector selects the waiting claims ahead of (or level with) a claim
// waiting since, within the try-th span back from it (0 first). last says
// that this read has no lower bound: if it finds no member ahead, there is
// none.
func SpanSelector(since time.Time, try int) (selector string, last bool) {
	sel := claim.AheadSelector(since)
	if try >= len(spans) {
		return sel, true
	}
	from := since.Add(-spans[try]).UnixMilli()
	return sel + "," + claim.SinceLabel + ">" + strconv.FormatInt(from-1, 10), false
}
