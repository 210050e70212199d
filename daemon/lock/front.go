package lock

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/queue"
)

// waitEligible blocks until this node is admitted by the queue, or its
// claim is no longer waiting. Behind its class's front it follows its
// predecessor (follow); in the front it watches the active claims and
// the front and decides from them (atFront). A node that restarts keeps
// the role its label says.
func (l *Lock) waitEligible(ctx context.Context) error {
	role := queue.RoleOf(l.current().labels)
	// Running again: the stopped label a stop left comes off.
	if err := l.writeRole(ctx, role); err != nil {
		return err
	}
	front := l.watching() != nil || role != queue.RoleBehind
	var left time.Time // when this node last left the front
	for {
		if l.current().state != claim.Waiting {
			return nil
		}
		if !front {
			var err error
			if front, err = l.follow(ctx, left); err != nil {
				return err
			}
			continue
		}
		admitted, err := l.atFront(ctx)
		if err != nil || admitted {
			return err
		}
		front, left = false, l.o.Now()
	}
}

// reenterAfter is how long a node that left the front, counting too many
// ahead of it there, does not come back on its predecessor's being in
// unless that changes. The members ahead of it with a front label may
// hold a stale one: nodes that were all NotReady each took the front as
// the first live member of the class, and once Ready they counted one
// another; a node that left and came straight back for its predecessor's
// stale label went round dozens of times, four Lists each (the
// simulator's L3b).
const reenterAfter = 5 * time.Second

// staleLook is how often a node of the front reads directly while its
// watch is stale (after an outage, until it has caught up).
const staleLook = 2 * time.Second

// atFront decides, in the front, from the watch of the active claims and
// the front, until this node is admitted (true) or counts itself behind
// the edge (false: it has taken its front label off and stopped the
// watch).
func (l *Lock) atFront(ctx context.Context) (bool, error) {
	for {
		if w := l.watching(); w != nil && w.own != claim.LimitsDigest(l.current().claim.Limits) {
			l.stopWatch() // this node's limits changed: other claims bind it
		}
		if err := l.ensureWatch(ctx); err != nil {
			return false, err
		}
		snap, err := l.frontSnapshot(ctx)
		if err != nil {
			return false, err
		}
		if l.current().state != claim.Waiting {
			return true, nil // Acquire decides from what it is now
		}
		now := l.o.Now()
		q, admitted, reportIn := l.look(ctx, snap, now)
		if admitted {
			return true, nil
		}
		read, probeIn := l.probeAhead(ctx, q, now, false)
		if read {
			continue // a node ahead read as it is now
		}
		self := l.self()
		role, ahead := queue.Standing(self, snap, l.counts(q, queue.ClassOf(self), now))
		if err := l.writeRole(ctx, role); err != nil {
			return false, err
		}
		if role == queue.RoleBehind {
			l.stopWatch()
			l.log.Debug("behind the front of the queue: following the node ahead", "ahead_in_class", ahead)
			return false, nil
		}
		reason := q.Blocked[l.o.Node]
		if reason == "" {
			reason = "waiting for the nodes ahead"
		}
		l.setStatus(Status{State: claim.Waiting, Position: q.Position(l.o.Node), Reason: reason})
		if err := l.waitChange(ctx, l.frontWait(soonest(probeIn, reportIn))); err != nil {
			return false, err
		}
	}
}

// frontWait is how long a node of the front waits for a change before it
// looks again: at least now and then, since the grace for silent nodes
// and the alarms are about time, not changes; when the readiness of a
// node ahead is due to be read or this node starts to report alarms
// (due, if positive); and soon while
// it reads directly, since then nothing wakes it when a slot is freed
// (a few nodes of each class do).
func (l *Lock) frontWait(due time.Duration) time.Duration {
	wait := l.jitter(min(l.o.WaitingGrace/4, 15*time.Second) + time.Second)
	if due > 0 {
		wait = min(wait, due)
	}
	if w := l.watching(); w == nil || w.stale() {
		wait = min(wait, l.jitter(staleLook))
	}
	return wait
}

// look decides from a snapshot of the front: whether this node is
// admitted, and the queue that says so. It notes who is eligible (for
// the grace of silent nodes) and raises the alarms it shows; reportIn,
// when positive, is how soon this node, at the front but not yet
// settled there (alarmSettle), starts to report them.
func (l *Lock) look(ctx context.Context, snap []claim.Participant, now time.Time) (q claim.Queue, admitted bool, reportIn time.Duration) {
	server := l.o.ServerNow()
	q = claim.EligibilityUpTo(snap, server, l.o.TTL, l.silent(now), l.o.Node)
	l.noteEligible(q, now)
	report := reportsAlarms(q, l.o.Node)
	if unsettled := alarmSettle - server.Sub(l.current().claim.Since); report && unsettled > 0 {
		report, reportIn = false, unsettled
	}
	l.raiseAlarms(ctx, snap, server, report)
	return q, q.Eligible(l.o.Node), reportIn
}

// soonest is the earlier of two durations that are positive, or 0 if
// neither is.
func soonest(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	default:
		return min(a, b)
	}
}

// counts says which members of class c ahead of this node hold it back:
// the live ones, but not one that q shows blocked only in domains of
// rules c does not name (a rule of another configuration): it keeps no
// member of c behind it out.
func (l *Lock) counts(q claim.Queue, c queue.Class, now time.Time) func(claim.Participant) bool {
	silent := l.silent(now)
	return func(p claim.Participant) bool {
		if !queue.Live(p, silent) {
			return false
		}
		in := q.BlockedIn[p.Name]
		if len(in) == 0 {
			return true
		}
		for _, label := range in {
			if label == "" || c.Names(label) {
				return true
			}
		}
		return false
	}
}

// self is this node as the queue reads it, from its claim as this daemon
// knows it.
func (l *Lock) self() claim.Participant {
	return l.current().participant(l.o.Node)
}

// frontSnapshot is the front as this node knows it: the watch's cache of
// the active claims, the waiting ones that publish other limits than this
// node's, and the front; read directly from the API server's cache while
// the watch is stale or has been quiet (a watch can stall without
// failing, resumed behind a lagging cache). Its own claim is as this
// daemon knows it.
func (l *Lock) frontSnapshot(ctx context.Context) ([]claim.Participant, error) {
	var nodes []*corev1.Node
	if w := l.watching(); w != nil && !w.stale() && !w.quiet() {
		nodes = w.list()
	} else {
		var err error
		if nodes, _, err = l.listBinding(ctx, l.current().claim.Limits, false, true); err != nil {
			return nil, err
		}
	}
	return l.withOwn(l.distrust(l.applyReadiness(l.claims.participants(nodes))), l.current()), nil
}

// writeRole writes this node's front label, if it is not role already,
// keeping its waiting claim as it is.
func (l *Lock) writeRole(ctx context.Context, role queue.Role) error {
	for {
		cur := l.current()
		_, stopped := cur.labels[queue.StoppedLabel]
		if cur.state != claim.Waiting || cur.err != nil || (queue.RoleOf(cur.labels) == role && !stopped) {
			return nil
		}
		_, err := l.writeClaim(ctx, claim.Waiting, cur.claim, keepSchedule, role, marks.Change{})
		if err == nil {
			l.log.Debug("front of the queue", "role", string(role))
			return nil
		}
		if err := l.reread(ctx, err); err != nil {
			return err
		}
	}
}

// resyncEvery is how long, at the least, a node behind the front follows
// one predecessor before it reads its class again (jittered up to twice
// that): the repair for what a watch missed, and for a predecessor at the
// head of its class that never comes into the front (a daemon that
// hangs). Each resync that finds nothing changed doubles it, up to
// resyncMaxShift doublings, until the predecessor moves: a node far back
// in a long queue waits for hours, and a resync at a fixed period made
// its cost grow with its wait, and a roll's with the square of its nodes.
const (
	resyncEvery    = 10 * time.Minute
	resyncMaxShift = 3 // 80 minutes
)

// follow waits behind the front: it finds its predecessor and watches it
// until it should come into the front (true), or its claim is no longer
// waiting (false). left is when this node last left the front.
func (l *Lock) follow(ctx context.Context, left time.Time) (bool, error) {
	// ahead are the live members of the class ahead of this node that the
	// last read found, nearest first, not yet followed: when the one
	// followed turns out NotReady or stopped (a read of metadata does not
	// show readiness), the next is followed without another read. A
	// class whose members were all NotReady cost a read per member.
	var ahead []claim.Participant
	var r resyncs
	for {
		if l.current().state != claim.Waiting {
			return false, nil
		}
		self := l.self()
		if len(ahead) == 0 {
			var err error
			if ahead, r.span, err = l.findAhead(ctx, self, r.span); err != nil {
				return false, err
			}
		}
		if len(ahead) == 0 {
			return true, nil // the first live member of its class
		}
		pred := ahead[0]
		ahead = ahead[1:]
		if r.due && queue.RoleOf(pred.Labels) == queue.RoleBehind {
			r.due = false
			if enter, err := l.headsOutside(ctx, pred); enter || err != nil {
				return enter, err
			}
		}
		l.setStatus(Status{State: claim.Waiting, Position: -1, Behind: pred.Name, Reason: "behind the front of the queue"})
		move, why, err := l.followOne(ctx, self, pred.Name, left.Add(reenterAfter), r.every(pred.Name))
		switch {
		case err != nil || move == queue.Enter:
			return move == queue.Enter, err
		case why == cannotGo:
			continue // the next one ahead, as read
		}
		ahead = nil
		if !r.after(pred.Name, why == resyncDue) {
			continue
		}
		if err := l.recheckOwn(ctx); err != nil {
			return false, err
		}
	}
}

// recheckOwn reads the own claim again at a resync (an admin may have
// removed or changed it), unless the live watch of the own Node shows it
// as this daemon knows it: nodes far back resync several times a wait,
// and a GET for each was most of what a long queue's waiting cost.
func (l *Lock) recheckOwn(ctx context.Context) error {
	if l.o.OwnWatched != nil {
		if m, ok := l.o.OwnWatched(); ok {
			cur := l.current()
			if m.GetUID() == cur.uid && m.GetLabels()[claim.Label] == string(cur.state) &&
				m.GetAnnotations()[claim.Annotation] == cur.annotations[claim.Annotation] {
				return nil
			}
		}
	}
	_, _, err := l.Own(ctx)
	return err
}

// resyncs is follow's back-off: each resync that finds the same
// predecessor doubles the next delay, and the predecessor's moving
// starts it again, with the search from the nearest span.
type resyncs struct {
	due      bool   // the last follow ended for a resync
	span     int    // the span that held the predecessor: a resync reads it first
	quiet    int    // resyncs in a row that found the same predecessor
	followed string // the predecessor before the last resync
}

// every is how long to follow pred before the next resync.
func (r *resyncs) every(pred string) time.Duration {
	if pred != r.followed {
		r.quiet = 0 // another predecessor: the resyncs start again
	}
	return resyncEvery << min(r.quiet, resyncMaxShift)
}

// after notes how following pred ended: by a resync (resync) or by its
// moving. It reports whether it was a resync.
func (r *resyncs) after(pred string, resync bool) bool {
	r.due = resync
	if !resync {
		r.span, r.quiet = 0, 0 // it moved: the nearest span first
		return false
	}
	r.quiet++
	r.followed = pred
	return true
}

// headsOutside reports whether pred, a waiting member with no front
// label, heads its class (no live member ahead of it): at the head, yet
// not in the front for a resync's time, its daemon writes no front label,
// or hangs. The node behind it then enters the front itself; the front
// passes the silent one over if it must.
func (l *Lock) headsOutside(ctx context.Context, pred claim.Participant) (bool, error) {
	before, _, err := l.findAhead(ctx, pred, 0)
	if err != nil || len(before) > 0 {
		return false, err
	}
	l.log.Debug("the node ahead heads the queue without coming into the front; entering", "ahead", pred.Name)
	return true, nil
}

// findAhead reads the waiting members of p's class just ahead of it, in
// spans widened from the span from until one holds a live member (or
// the read reached the class's first place), and returns those, nearest
// first, and the span that held them. Each read is of a few members, however long the class: a read
// of the whole class ahead, at each resync of each node behind the front,
// would make a roll's bytes grow with the square of its nodes.
func (l *Lock) findAhead(ctx context.Context, p claim.Participant, from int) ([]claim.Participant, int, error) {
	class := queue.ClassOf(p).Selector()
	for try := from; ; try++ {
		span, last := queue.SpanSelector(p.Claim.Since, try)
		nodes, _, err := l.listNodes(ctx, class+","+span, "0", "")
		if err != nil {
			return nil, 0, fmt.Errorf("find the node ahead in the queue: %w", err)
		}
		var parse claimCache // not kept: the read is this call's
		if ahead := queue.Ahead(p, l.distrust(l.applyReadiness(parse.participants(nodes)))); len(ahead) > 0 || last {
			return ahead, try, nil
		}
	}
}

// Why a node stopped following its predecessor.
type findReason int

const (
	changed   findReason = iota // it left the class or its place
	cannotGo                    // it is NotReady or stopped
	resyncDue                   // the slow resync's time came
	ended                       // the watch ended (the API server ends each after 30 to 60 min)
)

// followOne watches the predecessor name until Follow says to move, or
// the resync is due resyncIn from now (jittered): a watch that ends is
// opened again, to the same deadline, its first event the predecessor as
// it is then.
func (l *Lock) followOne(ctx context.Context, self claim.Participant, name string, notBefore time.Time, resyncIn time.Duration) (queue.Move, findReason, error) {
	deadline := l.o.Now().Add(l.jitter(resyncIn))
	for {
		opened := l.o.Now()
		move, why, err := l.watchPredecessor(ctx, self, name, notBefore, deadline)
		if err != nil || why != ended {
			return move, why, err
		}
		if l.o.Now().Sub(opened) < time.Second {
			// Ended at once (a server closing watches): not in a loop.
			if err := sleep(ctx, l.jitter(time.Second)); err != nil {
				return queue.Stay, changed, err
			}
		}
	}
}

// watchPredecessor watches the Node of this node's predecessor (whole,
// for its Ready condition; one object) until Follow says to move: Find
// when the watch ends or the predecessor leaves, and why; Enter when self
// should come into the front, but not before notBefore.
func (l *Lock) watchPredecessor(ctx context.Context, self claim.Participant, name string, notBefore, resyncAt time.Time) (move queue.Move, why findReason, err error) {
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: "0"}
	w, err := l.o.Client.CoreV1().Nodes().Watch(ctx, opts)
	if err != nil {
		return queue.Find, changed, fmt.Errorf("watch %s, the node ahead in the queue: %w", name, err)
	}
	defer w.Stop()
	timer := time.NewTimer(max(resyncAt.Sub(l.o.Now()), 0))
	defer timer.Stop()
	var holdOff <-chan time.Time // armed while an enter waits for notBefore
	for {
		select {
		case <-ctx.Done():
			return queue.Stay, changed, context.Cause(ctx)
		case <-timer.C:
			return queue.Find, resyncDue, nil
		case <-holdOff:
			return queue.Enter, changed, nil
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return queue.Find, ended, nil
			}
			n, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				continue
			}
			switch m, why := l.predecessorMoved(self, n, ev.Type == watch.Deleted); {
			case m == queue.Find:
				return m, why, nil
			case m == queue.Stay:
				holdOff = nil
			case holdOff != nil:
				// Waiting out notBefore already.
			case l.o.Now().Before(notBefore):
				// In, but this node has just left the front for
				// counting too many ahead: that label may be stale.
				holdOff = time.After(notBefore.Sub(l.o.Now()))
			default:
				return queue.Enter, changed, nil
			}
		}
	}
}

// predecessorMoved reads the predecessor n as its watch delivered it
// (gone: deleted): the move it calls for, and why when it is Find. It
// notes the predecessor's readiness.
func (l *Lock) predecessorMoved(self claim.Participant, n *corev1.Node, gone bool) (queue.Move, findReason) {
	l.ready.note(n.Name, nodeReady(n) && !gone, l.o.Now())
	var parse claimCache
	p := parse.participants([]*corev1.Node{n})
	if len(p) == 0 {
		return queue.Find, changed // its claim is gone
	}
	pred := l.distrust(p)[0]
	m := queue.Follow(self, pred, gone)
	if m == queue.Find && !gone && !queue.Live(pred, nil) {
		return m, cannotGo
	}
	return m, changed
}
