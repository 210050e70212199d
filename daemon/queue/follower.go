package queue

import (
	"slices"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// The resync of a node behind the front (docs/claims.md, "Dead, stopped
// and NotReady members"): after following one predecessor this long at
// the least (jittered up to twice that), it reads its class again, the
// repair for what a watch missed and for a predecessor at the head of its
// class that never comes into the front. Each resync that finds the same
// predecessor doubles the delay, up to ResyncMaxShift doublings: a node
// far back waits for hours, and a fixed period made a roll's cost grow
// with the square of its nodes.
const (
	ResyncEvery    = 10 * time.Minute
	ResyncMaxShift = 3
)

// FollowKind is what a Follower asks its lock to do next.
type FollowKind int8

const (
	// ReadAhead: read the waiting members of Of's class ahead of it, in
	// the span Span back from it (SpanSelector), and give the result as a
	// Found event.
	ReadAhead FollowKind = iota
	// ReadFront: read the waiting members of Of's class that carry a
	// front label, and give the result as a Found event.
	ReadFront
	// RecheckOwn: read the own claim again (an admin may have removed it)
	// and give a Rechecked event, if it is still waiting.
	RecheckOwn
	// WatchPred: watch the Node named Pred (keep a watch of it that is
	// open; reopen one that ends), give each change as a Changed event and
	// a Woke event at Wake.
	WatchPred
	// EnterFront: stop following; come into the front (Why says why).
	EnterFront
)

// FollowAction is a Follower's next request.
type FollowAction struct {
	Kind FollowKind
	Of   claim.Participant // ReadAhead, ReadFront
	Span int               // ReadAhead
	Pred string            // WatchPred
	Wake time.Time         // WatchPred
	Why  string            // EnterFront
}

// FollowEventKind is what a Follower is told.
type FollowEventKind int8

const (
	// Found: a ReadAhead's or ReadFront's result, every participant the
	// read returned.
	Found FollowEventKind = iota
	// Changed: the watched predecessor as its watch delivered it (Left:
	// the Node was deleted or no longer carries a claim).
	Changed
	// Woke: the time came that a WatchPred named.
	Woke
	// Rechecked: the own claim read again is still waiting, as Self.
	Rechecked
)

// FollowEvent is an observation given to Follower.Step. Now is when it
// was made: the Follower reads no clock.
type FollowEvent struct {
	Kind FollowEventKind
	Now  time.Time
	Read []claim.Participant // Found
	Pred claim.Participant   // Changed
	Left bool                // Changed
	Self claim.Participant   // Rechecked
}

// Follower decides for a waiting node behind the edge of its class's
// front: which node ahead it follows, when it reads its class again, and
// when it comes into the front. It is the lock's follow as a state
// machine: Start and Step return the next request, and the lock does it
// and steps again with what it saw, until EnterFront (or the own claim is
// no longer waiting, which the lock sees and which ends the Follower).
type Follower struct {
	self claim.Participant
	// notBefore: the node left the front at this time less reenter; a
	// predecessor that is in brings it back no sooner, since that label
	// may be stale (members ahead that all counted one another).
	notBefore time.Time
	jitter    func(time.Duration) time.Duration

	// pending is the span the pending ReadAhead reads; front, that the
	// pending read is of the class's front (a resync that found a
	// predecessor with no front label).
	pending int
	front   bool
	// ahead are the live members ahead that the last read found, nearest
	// first, not yet followed: when the one followed turns out NotReady
	// or stopped (a read of metadata does not show readiness), the next
	// is followed without another read.
	ahead []claim.Participant
	pred  claim.Participant // followed; Name "" before the first
	// resync is when the resync of pred is due; early, that pred is in
	// but notBefore has not come.
	resync time.Time
	early  bool

	// The resyncs' back-off. due: the last follow ended for a resync;
	// span: the span that held the predecessor, read first at a resync;
	// quiet: resyncs in a row that found followed again.
	due      bool
	span     int
	quiet    int
	followed string
}

// NewFollower starts following for self. notBefore: when it last left the
// front plus the time it stays out unless its predecessor changes (zero
// when it has not been in the front); jitter returns a duration in [d, 2d).
func NewFollower(self claim.Participant, notBefore time.Time, jitter func(time.Duration) time.Duration) *Follower {
	return &Follower{self: self, notBefore: notBefore, jitter: jitter}
}

// Start is the first request: read the class ahead of self.
func (f *Follower) Start() FollowAction { return f.read(0) }

// Step takes the result of the last request and returns the next.
func (f *Follower) Step(ev FollowEvent) FollowAction {
	switch ev.Kind {
	case Found:
		return f.found(ev)
	case Changed:
		return f.changed(ev)
	case Woke:
		switch {
		case f.early && !ev.Now.Before(f.notBefore):
			return FollowAction{Kind: EnterFront, Why: "the node ahead is in the front"}
		case !ev.Now.Before(f.resync):
			f.ahead, f.due = nil, true
			f.quiet++
			f.followed = f.pred.Name
			return FollowAction{Kind: RecheckOwn}
		}
		return f.watch()
	default: // Rechecked
		f.self = ev.Self
		return f.read(f.span)
	}
}

func (f *Follower) read(span int) FollowAction {
	f.pending, f.front = span, false
	return FollowAction{Kind: ReadAhead, Of: f.self, Span: span}
}

// found takes a read of the class ahead of this node: an empty span
// widens to the next, until one holds a live member or the read had no
// lower bound.
func (f *Follower) found(ev FollowEvent) FollowAction {
	if f.front {
		// At a resync, the predecessor has no front label: the class's
		// front is read. With no live member in it ahead of this node,
		// the members ahead do not come in (their daemons hang, one or
		// several in a row): this node enters, and the front passes
		// them over after the grace.
		f.front = false
		if !slices.ContainsFunc(ev.Read, func(p claim.Participant) bool { return f.inFront(p) }) {
			return FollowAction{Kind: EnterFront, Why: "no node of its class ahead of it is in the front"}
		}
		return f.follow(f.pred, ev.Now)
	}
	span := f.pending
	ahead := Ahead(f.self, ev.Read)
	if len(ahead) == 0 && span < len(spans) {
		return f.read(span + 1)
	}
	if len(ahead) == 0 {
		return FollowAction{Kind: EnterFront, Why: "the first live member of its class"}
	}
	f.ahead, f.span = ahead, span
	return f.next(ev.Now)
}

// next follows the nearest member ahead not yet followed; with none
// left, it reads the class again.
func (f *Follower) next(now time.Time) FollowAction {
	if len(f.ahead) == 0 {
		return f.read(f.span)
	}
	pred := f.ahead[0]
	f.ahead = f.ahead[1:]
	if f.due && RoleOf(pred.Labels) == RoleBehind {
		f.due, f.pred, f.front = false, pred, true
		return FollowAction{Kind: ReadFront, Of: f.self}
	}
	return f.follow(pred, now)
}

// inFront reports whether p is a live waiting member of this node's class
// ahead of it with a front label.
func (f *Follower) inFront(p claim.Participant) bool {
	return p.Name != f.self.Name && member(p, ClassOf(f.self)) && Live(p, nil) &&
		RoleOf(p.Labels) != RoleBehind && claim.QueueOrder(p, f.self) < 0
}

// follow starts following pred: its resync is due after ResyncEvery,
// doubled for each resync in a row that found it.
func (f *Follower) follow(pred claim.Participant, now time.Time) FollowAction {
	if pred.Name != f.followed {
		f.quiet = 0
	}
	f.pred, f.early = pred, false
	f.resync = now.Add(f.jitter(ResyncEvery << min(f.quiet, ResyncMaxShift)))
	return f.watch()
}

// watch is the request while following: the predecessor's watch, and the
// wake-up at the resync or, when the predecessor is in early, at
// notBefore.
func (f *Follower) watch() FollowAction {
	wake := f.resync
	if f.early && f.notBefore.Before(wake) {
		wake = f.notBefore
	}
	return FollowAction{Kind: WatchPred, Pred: f.pred.Name, Wake: wake}
}

// changed takes the predecessor as its watch showed it.
func (f *Follower) changed(ev FollowEvent) FollowAction {
	if ev.Pred.Name != f.pred.Name {
		return f.watch() // a change of a node no longer followed
	}
	switch Follow(f.self, ev.Pred, ev.Left) {
	case Find:
		if !ev.Left && !Live(ev.Pred, nil) {
			return f.next(ev.Now) // it cannot go: the next one ahead, as read
		}
		// It left its place: the nearest span first.
		f.ahead, f.due, f.span, f.quiet = nil, false, 0, 0
		return f.read(0)
	case Stay:
		f.early = false
		return f.watch()
	}
	switch {
	case f.early:
		return f.watch() // waiting out notBefore already
	case ev.Now.Before(f.notBefore):
		// In, but this node has just left the front for counting too
		// many ahead: that label may be stale.
		f.early = true
		return f.watch()
	}
	return FollowAction{Kind: EnterFront, Why: "the node ahead is in the front"}
}
