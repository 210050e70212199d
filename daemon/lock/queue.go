package lock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kured-host/kured-host/daemon/claim"
)

// snapshot is the claimed nodes as the watch cache has them, or, when not
// watching, as a List served from the API server's cache has them (both
// may lag; eligibility is only about fairness, verify reads consistently),
// with this node's own claim as this daemon knows it.
func (l *Lock) snapshot(ctx context.Context) ([]claim.Participant, error) {
	var nodes []*corev1.Node
	if w := l.watching(); w != nil && !w.stale() && !w.quiet() {
		var err error
		if nodes, err = w.lister.List(labels.Everything()); err != nil {
			return nil, err
		}
	} else {
		// Not watching, or the watch failed (an outage) and client-go's
		// back-off may keep it behind for up to half a minute after the
		// API server is back, or it has been quiet for a while: read the
		// queue itself.
		var err error
		if nodes, err = l.listClaimed(ctx, "0"); err != nil {
			return nil, err
		}
	}
	ps := l.distrust(l.applyReadiness(l.claims.participants(nodes)))
	cur := l.current()
	ps = slices.DeleteFunc(ps, func(p claim.Participant) bool { return p.Name == l.o.Node })
	if cur.state != "" {
		ps = append(ps, claim.Participant{Name: l.o.Node, Labels: cur.labels, Ready: true, Claim: cur.claim})
	}
	return ps, nil
}

// listClaimed lists the claimed nodes at resourceVersion rv ("0": from
// the API server's cache; "": consistent). With Metadata it reads their
// metadata only, which is where the claims are: a whole Node is several
// times larger, and a queue of hundreds read by each of its nodes a few
// times made most of the bytes the API server sent. Each is then taken as
// Ready unless read otherwise (applyReadiness, probeReadiness): far back,
// a NotReady node ahead is then not passed over, which only makes this
// node wait for the window, where it is read; an entering node that
// verifies may give way to it, which is always safe.
func (l *Lock) listClaimed(ctx context.Context, rv string) ([]*corev1.Node, error) {
	opts := metav1.ListOptions{LabelSelector: claim.Label, ResourceVersion: rv}
	var nodes []*corev1.Node
	if l.o.Metadata == nil {
		list, err := l.o.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list claimed nodes: %w", err)
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
		return nodes, nil
	}
	list, err := l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list claimed nodes: %w", err)
	}
	for i := range list.Items {
		nodes = append(nodes, queueNode(list.Items[i].ObjectMeta, corev1.ConditionTrue))
	}
	return nodes, nil
}

// Participants turns Nodes into the rules' view of them, as another node's
// lock sees them: one Participant for each Node with a claim label or
// annotation (what cannot be read is kept, with Err set), each judged by
// claim.Plausible against serverNow (the API server's clock) and
// tolerance (the stated clock tolerance); Nodes without a claim are left
// out.
func Participants(nodes []*corev1.Node, serverNow time.Time, tolerance time.Duration) []claim.Participant {
	var none claimCache
	ps := none.participants(nodes)
	for i, p := range ps {
		ps[i] = claim.Plausible(p, serverNow, tolerance)
	}
	return ps
}

// distrust judges every other node's claim in ps by claim.Plausible (this
// node's own claim is left as read: the daemon knows what it wrote). It
// runs on every read, after the cache of parsed claims, because the
// verdict depends on the time and on the Nodes' labels, not only on the
// claim.
func (l *Lock) distrust(ps []claim.Participant) []claim.Participant {
	now := l.o.ServerNow()
	for i, p := range ps {
		if p.Name != l.o.Node {
			ps[i] = claim.Plausible(p, now, l.o.ClockTolerance)
		}
	}
	return ps
}

// claimCache keeps each node's claim as last parsed, with the label and
// annotation it was parsed from. A waiting daemon near the front reads the
// whole queue on every change to it; parsing every claim every time was
// most of its CPU in a queue of hundreds. The claims it returns share
// their maps and slices between calls: the rules only read them.
type claimCache struct {
	mu     sync.Mutex
	parsed map[string]parsedClaim // node name -> its last parse
}

type parsedClaim struct {
	label, annotation string
	claim             claim.Claim
	err               error
}

func (cc *claimCache) participants(nodes []*corev1.Node) []claim.Participant {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	// Rebuilt from the nodes each time, so that a node gone from the
	// queue is forgotten.
	next := make(map[string]parsedClaim, len(nodes))
	ps := make([]claim.Participant, 0, len(nodes))
	for _, n := range nodes {
		lv, ann := n.Labels[claim.Label], n.Annotations[claim.Annotation]
		if lv == "" && ann == "" {
			continue
		}
		p, ok := cc.parsed[n.Name]
		if !ok || p.label != lv || p.annotation != ann {
			p = parsedClaim{label: lv, annotation: ann}
			p.claim, p.err = claim.Parse(lv, ann)
		}
		next[n.Name] = p
		ps = append(ps, claim.Participant{Name: n.Name, Labels: n.Labels, Ready: nodeReady(n), Claim: p.claim, Err: p.err})
	}
	cc.parsed = next
	return ps
}

// readyStatus is n's Ready condition's status ("" when it has none).
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func nodeReady(n *corev1.Node) bool { return readyStatus(n) == corev1.ConditionTrue }

// waitEligible blocks until this node is admitted by the queue. Near the
// front of the queue it watches the claimed nodes and wakes on every
// change, so a freed slot is taken as soon as the watch delivers the
// release. Further back it does not watch: it reads the queue now and
// then (farPace), a few times per wait however long the queue.
func (l *Lock) waitEligible(ctx context.Context) error {
	var far farPace
	eager := false
	for {
		snap, err := l.snapshot(ctx)
		if err != nil {
			return err
		}
		now, server := l.o.Now(), l.o.ServerNow()
		q := claim.EligibilityUpTo(snap, server, l.o.TTL, l.silent(now), l.o.Node)
		l.noteEligible(q, now)
		l.raiseAlarms(ctx, snap, server)
		if q.Eligible(l.o.Node) {
			return nil
		}
		changed, probeIn := l.probeReadiness(ctx, q, now, eager)
		eager = false
		if changed {
			continue // a node ahead is NotReady, or Ready again
		}
		reason := q.Blocked[l.o.Node]
		if reason == "" {
			reason = "waiting for the nodes ahead"
		}
		pos := q.Position(l.o.Node)
		l.setStatus(Status{State: claim.Waiting, Position: pos, Reason: reason})
		if l.current().state != claim.Waiting {
			return nil
		}
		// Far back counts only the waiting nodes ahead that are not
		// passed over (NotReady, silent): a front of dead nodes must not
		// keep every other node far back.
		var counted []string
		for _, n := range q.Waiting[:max(pos, 0)] {
			if _, skipped := q.Skipped[n]; !skipped {
				counted = append(counted, n)
			}
		}
		if window := l.window(); len(counted) >= window {
			l.stopWatch()
			ahead := len(counted) - window + 1
			left, room, err := l.waitFar(ctx, &far, ahead, markOf(snap, counted[len(counted)-window]), now, snap)
			if err != nil {
				return err
			}
			// A slot left free: the nodes ahead that the queue lets go
			// are read at once.
			eager = room
			if left {
				// Most likely within the window now, where it
				// watches: the watch's List is the read of the queue.
				if err := l.ensureWatch(ctx); err != nil {
					return err
				}
			}
			continue
		}
		if l.watching() == nil {
			if err := l.ensureWatch(ctx); err != nil {
				return err
			}
			continue // look again from the fresh cache
		}
		// Re-check at least now and then: the grace for silent nodes
		// and the alarms are about time, not changes; and when the
		// readiness of a node ahead is due to be read.
		wait := l.jitter(min(l.o.WaitingGrace/4, 15*time.Second) + time.Second)
		if probeIn > 0 {
			wait = min(wait, probeIn)
		}
		if err := l.waitChange(ctx, wait); err != nil {
			return err
		}
	}
}

// silent reports waiting nodes that have been eligible (in this daemon's
// view) for longer than the grace without announcing.
func (l *Lock) silent(now time.Time) func(string) bool {
	l.mu.Lock()
	first := copyTimes(l.firstEligible)
	paused, resumed := l.paused, l.resumed
	l.mu.Unlock()
	return func(name string) bool {
		t, ok := first[name]
		return ok && !paused && name != l.o.Node && l.o.WaitingGrace > 0 && now.Sub(maxTime(t, resumed)) > l.o.WaitingGrace
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func copyTimes(m map[string]time.Time) map[string]time.Time {
	c := make(map[string]time.Time, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// noteEligible records when each other waiting node became eligible (or
// was passed over for its silence) and has stayed so, and forgets the
// others: a node that was NotReady, or held back by a limit, starts its
// grace afresh once it may go (it was passed over at once, the grace long
// spent, when it came back).
func (l *Lock) noteEligible(q claim.Queue, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, name := range q.Waiting {
		why, skipped := q.Skipped[name]
		if q.Eligible(name) || (skipped && why == claim.SkippedSilent) {
			if l.firstEligible[name].IsZero() {
				l.firstEligible[name] = now
			}
			continue
		}
		delete(l.firstEligible, name)
	}
	for name := range l.firstEligible {
		if !slices.Contains(q.Waiting, name) {
			delete(l.firstEligible, name)
		}
	}
}
