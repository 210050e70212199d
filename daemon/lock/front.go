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

// atFront decides, in the front, from the watch of the active claims and
// the front (queue.Front.Look), until this node is admitted (true) or
// counts itself behind the edge (false: it has taken its front label off
// and stopped the watch).
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
		w := l.watching()
		look := l.front.Look(queue.View{Self: l.self(), Snap: snap, Now: l.o.Now(), Server: l.o.ServerNow(), Stale: w == nil || w.stale()})
		l.reportAlarms(ctx, look.Alarms)
		if look.Admitted {
			return true, nil
		}
		if l.readReady(ctx, look.Probe) {
			continue // a node ahead read as it is now
		}
		if err := l.writeRole(ctx, look.Role); err != nil {
			return false, err
		}
		if look.Role == queue.RoleBehind {
			l.stopWatch()
			l.log.Debug("behind the front of the queue: following the node ahead", "ahead_in_class", look.Ahead)
			return false, nil
		}
		l.setStatus(Status{State: claim.Waiting, Position: look.Queue.Position(l.o.Node), Reason: look.Reason})
		if err := l.waitChange(ctx, look.Wait); err != nil {
			return false, err
		}
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
	return l.withOwn(l.distrust(l.front.Readiness(l.claims.Parse(nodes))), l.current()), nil
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

// follow waits behind the front as a queue.Follower decides: it does the
// Follower's reads and watch and gives it what they showed, until this
// node should come into the front (true) or its claim is no longer
// waiting (false). left is when this node last left the front.
func (l *Lock) follow(ctx context.Context, left time.Time) (bool, error) {
	f := queue.NewFollower(l.self(), left.Add(reenterAfter), l.jitter)
	var w predWatch
	defer w.stop()
	for a := f.Start(); l.current().state == claim.Waiting; {
		var ev queue.FollowEvent
		var err error
		if a.Kind != queue.WatchPred {
			// A watch is kept only while the Follower keeps following
			// the same node: one opened again delivers the node as it
			// is first, which a read from a lagging cache may not have
			// shown (a predecessor read as still waiting after its
			// claim was removed was then followed with no event to
			// come: TestSim seed 884).
			w.stop()
		}
		switch a.Kind {
		case queue.EnterFront:
			l.log.Debug("coming into the front of the queue", "why", a.Why)
			return true, nil
		case queue.ReadAhead:
			ev.Kind = queue.Found
			ev.Read, err = l.readAhead(ctx, a.Of, a.Span)
		case queue.ReadFront:
			ev.Kind = queue.Found
			ev.Read, err = l.readClass(ctx, queue.ClassOf(a.Of).Selector()+","+queue.FrontLabel)
		case queue.RecheckOwn:
			ev.Kind = queue.Rechecked
			err = l.recheckOwn(ctx)
			ev.Self = l.self()
		case queue.WatchPred:
			l.setStatus(Status{State: claim.Waiting, Position: -1, Behind: a.Pred, Reason: "behind the front of the queue"})
			ev, err = l.watchPred(ctx, &w, a.Pred, a.Wake)
		}
		if err != nil {
			return false, err
		}
		ev.Now = l.o.Now()
		a = f.Step(ev)
	}
	return false, nil
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

// readAhead reads the waiting members of p's class in the span-th span
// of waiting-since ahead of it (queue.SpanSelector): a few members,
// however long the class. A read of the whole class ahead, at each resync
// of each node behind the front, would make a roll's bytes grow with the
// square of its nodes.
func (l *Lock) readAhead(ctx context.Context, p claim.Participant, span int) ([]claim.Participant, error) {
	sel, _ := queue.SpanSelector(p.Claim.Since, span)
	return l.readClass(ctx, queue.ClassOf(p).Selector()+","+sel)
}

// readClass reads the waiting members of a class that selector selects
// (a span of it, or its front), from the API server's cache.
func (l *Lock) readClass(ctx context.Context, selector string) ([]claim.Participant, error) {
	nodes, _, err := l.listNodes(ctx, selector, "0", "")
	if err != nil {
		return nil, fmt.Errorf("find the node ahead in the queue: %w", err)
	}
	var parse queue.Reader // not kept: the read is this call's
	return l.distrust(l.front.Readiness(parse.Parse(nodes))), nil
}

// predWatch is the watch of the predecessor's Node (whole, for its Ready
// condition; one object), kept open while the Follower follows the same
// node without a read in between.
type predWatch struct {
	name   string
	w      watch.Interface
	opened time.Time
}

func (p *predWatch) stop() {
	if p.w != nil {
		p.w.Stop()
		p.w = nil
	}
}

// watchPred waits for the next change of the Node name (opening its
// watch if it is not open), or for wake. A watch that ends is opened
// again, its first event the Node as it is then; one that ended at once
// (a server closing watches), after a second, not in a loop.
func (l *Lock) watchPred(ctx context.Context, p *predWatch, name string, wake time.Time) (queue.FollowEvent, error) {
	timer := time.NewTimer(max(wake.Sub(l.o.Now()), 0))
	defer timer.Stop()
	for {
		if p.w == nil || p.name != name {
			p.stop()
			opts := metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: "0"}
			w, err := l.o.Client.CoreV1().Nodes().Watch(ctx, opts)
			if err != nil {
				return queue.FollowEvent{}, fmt.Errorf("watch %s, the node ahead in the queue: %w", name, err)
			}
			p.name, p.w, p.opened = name, w, l.o.Now()
		}
		select {
		case <-ctx.Done():
			return queue.FollowEvent{}, context.Cause(ctx)
		case <-timer.C:
			return queue.FollowEvent{Kind: queue.Woke}, nil
		case ev, ok := <-p.w.ResultChan():
			if !ok || ev.Type == watch.Error {
				at := p.opened
				p.stop()
				if l.o.Now().Sub(at) < time.Second {
					if err := sleep(ctx, l.jitter(time.Second)); err != nil {
						return queue.FollowEvent{}, err
					}
				}
				continue
			}
			if n, isNode := ev.Object.(*corev1.Node); isNode {
				return l.predChanged(n, ev.Type == watch.Deleted), nil
			}
		}
	}
}

// predChanged is the predecessor n as its watch delivered it (deleted:
// gone), for the Follower; it notes n's readiness.
func (l *Lock) predChanged(n *corev1.Node, deleted bool) queue.FollowEvent {
	l.front.NoteReady(n.Name, queue.NodeReady(n) && !deleted, l.o.Now())
	var parse queue.Reader
	ps := parse.Parse([]*corev1.Node{n})
	if deleted || len(ps) == 0 {
		return queue.FollowEvent{Kind: queue.Changed, Pred: claim.Participant{Name: n.Name}, Left: true}
	}
	return queue.FollowEvent{Kind: queue.Changed, Pred: l.distrust(ps)[0]}
}
