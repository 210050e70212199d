package lock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
)

// snapshot is the queue as this node knows it, with its own claim as this
// daemon knows it. Near the front it is the last read of the queue (the
// view: readQueue) with the claims that bind this node from the watch of
// them in place of what the read showed; otherwise, or when the view is
// older than the watch or viewMaxAge, the queue read now from the API
// server's cache. Both may lag: eligibility is only about fairness, and verify
// reads the active claims consistently.
//
// Without whole, far back in a long queue it reads only the waiting
// claims nearest ahead (readQueue) and reports partial: the queue then
// cannot say whether this node is admitted, only which node it waits for.
func (l *Lock) snapshot(ctx context.Context, whole bool) (ps []claim.Participant, partial bool, err error) {
	own := l.current().claim.Limits
	if w := l.watching(); w != nil && w.own != claim.LimitsDigest(own) {
		l.stopWatch() // this node's limits changed: other claims bind it
	}
	w, v := l.watching(), l.currentView()
	if w != nil && v != nil && !v.filtered && !w.stale() && !v.at.Before(w.started) && l.o.Now().Sub(v.at) < viewMaxAge {
		var binding []*corev1.Node
		if !w.quiet() {
			binding = w.list()
		} else {
			// Quiet for a while: a watch can stall without failing
			// (resumed behind a lagging cache). The claims it
			// selects are few: read them.
			var err error
			if binding, _, err = l.listBinding(ctx, own, false); err != nil {
				return nil, false, err
			}
		}
		ps = v.withRead(l.bindingParticipants(binding), own)
		l.rereadDistrusted(ctx, v, false)
	} else {
		near := l.window()
		if whole {
			near = 0
		}
		nodes, part, err := l.readQueue(ctx, false, near)
		if err != nil {
			return nil, false, err
		}
		ps, partial = l.claims.participants(nodes), part
		if !partial {
			l.setView(newQueueView(ps, l.o.Now()))
		}
	}
	return l.withOwn(l.distrust(l.applyReadiness(ps)), l.current()), partial, nil
}

// withOwn puts this node's claim as it knows it (cur; none without one)
// in place of what a read showed of it.
func (l *Lock) withOwn(ps []claim.Participant, cur ownClaim) []claim.Participant {
	ps = slices.DeleteFunc(ps, func(p claim.Participant) bool { return p.Name == l.o.Node })
	if cur.state != "" {
		ps = append(ps, claim.Participant{Name: l.o.Node, Labels: cur.labels, Ready: true, Claim: cur.claim})
	}
	return ps
}

// besides is the nodes of more not in read: a waiting claim ahead that
// publishes other limits is read twice, as binding and as ahead.
func besides(read, more []*corev1.Node) []*corev1.Node {
	return slices.DeleteFunc(slices.Clone(more), func(n *corev1.Node) bool {
		return slices.ContainsFunc(read, func(r *corev1.Node) bool { return r.Name == n.Name })
	})
}

// bindingParticipants parses the claims read by listBinding, apart
// from the cache of the whole queue's (claimCache forgets what a call does
// not pass it).
func (l *Lock) bindingParticipants(nodes []*corev1.Node) []claim.Participant {
	return l.bindingClaims.participants(nodes)
}

// readQueue reads, as one snapshot, what of the queue matters to this
// node: the claims that bind it (listBinding) and the waiting claims ahead
// of its place (claim.AheadSelector), the latter at the former's
// resourceVersion exactly; consistent, or from the API server's cache.
// Nothing behind this node bars it from a slot but a claim that binds
// it, which listBinding reads wherever it is: a read of the whole queue
// was a response the size of the queue, N² bytes over a roll of N nodes
// each reading it once or twice. Without a place (this node's claim is
// not waiting or entering) it reads every claimed node.
//
// With near > 0 and more than near waiting claims ahead, it reads only
// the nearest of them, at least near (readNearest), and reports partial:
// a node far back needs only the one it waits for (the mark), and the
// rest cost each of the hundreds of nodes behind them a read.
func (l *Lock) readQueue(ctx context.Context, consistent bool, near int) (nodes []*corev1.Node, partial bool, err error) {
	cur := l.current()
	rv := "0"
	if consistent {
		rv = ""
	}
	if cur.err != nil || cur.claim.Since.IsZero() || (cur.state != claim.Waiting && cur.state != claim.Entering) {
		nodes, _, err := l.listNodes(ctx, claim.Label, rv, "")
		return nodes, false, err
	}
	binding, at, err := l.listBinding(ctx, cur.claim.Limits, consistent)
	if err != nil {
		return nil, false, err
	}
	var limit int64
	if near > 0 {
		limit = int64(near) + 1 // this node is among them (level with itself)
	}
	ahead, more, err := l.listPage(ctx, claim.AheadSelector(cur.claim.Since), at, limit)
	if err != nil {
		return nil, false, err
	}
	if near > 0 && more {
		if ahead, err = l.readNearest(ctx, cur.claim.Since, at, near, ahead); err != nil {
			return nil, false, err
		}
	}
	return append(binding, besides(binding, ahead)...), near > 0 && more, nil
}

// readNearest reads, at resourceVersion at, the waiting claims nearest
// ahead of a place since, at least near of them besides this node's own:
// spans of places back from since, each reaching 4 times further than the
// last, the first a sixteenth of the way to the furthest place of sample
// (a page of the claims ahead, in the order of their names: a sample of
// the queue ahead) and at least a second, or, from the second read for
// the same place on, a quarter wider than the width that held near claims
// the last time. A sixteenth of the way reads a sixteenth of the queue
// ahead: 150 claims for a node 2,500 back. It is called only when more
// than near are ahead.
func (l *Lock) readNearest(ctx context.Context, since time.Time, at string, near int, sample []*corev1.Node) ([]*corev1.Node, error) {
	hi := since.UnixMilli() + 1 // the places read are below hi
	span := int64(time.Second / time.Millisecond)
	l.mu.Lock()
	learned, learnedFor := l.nearSpan, l.nearSince
	l.mu.Unlock()
	if learned > 0 && learnedFor.Equal(since) {
		// The claims just ahead stay until the front reaches them (new
		// ones join behind): the width that held the window last time
		// holds it again, however long the queue ahead.
		span = learned
	} else {
		for _, n := range sample {
			if v, err := strconv.ParseInt(n.Labels[claim.SinceLabel], 10, 64); err == nil && v > 0 && v < hi {
				span = max(span, (hi-v)/16)
			}
		}
	}
	top := hi
	count := 0
	defer func() {
		if count == 0 {
			return
		}
		// A quarter more than the width that held near, so that one
		// claim gone ahead does not cost another List.
		width := (top - hi) * int64(near) / int64(count) * 5 / 4
		l.mu.Lock()
		l.nearSpan, l.nearSince = max(width, 1), since
		l.mu.Unlock()
	}()
	var got []*corev1.Node
	for ; count < near; span *= 4 {
		lo := hi - span
		sel := claim.SinceLabel + "<" + strconv.FormatInt(hi, 10)
		if lo > 0 {
			sel += "," + claim.SinceLabel + ">" + strconv.FormatInt(lo-1, 10)
		}
		page, _, err := l.listPage(ctx, sel, at, 0)
		if err != nil {
			return nil, err
		}
		for _, n := range page {
			if n.Name != l.o.Node {
				count++
			}
		}
		got = append(got, page...)
		hi = lo
		if lo <= 0 {
			break // every place ahead read
		}
	}
	return got, nil
}

// listPage lists, at resourceVersion at exactly, the Nodes selector
// selects, at most limit of them (0: all), and reports whether there are
// more.
func (l *Lock) listPage(ctx context.Context, selector, at string, limit int64) ([]*corev1.Node, bool, error) {
	opts := metav1.ListOptions{LabelSelector: selector, ResourceVersion: at, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: limit}
	return l.listAt(ctx, opts, nil)
}

// listActive lists the nodes whose claim takes a slot (activeSelector),
// from the API server's cache.
func (l *Lock) listActive(ctx context.Context) ([]*corev1.Node, error) {
	nodes, _, err := l.listNodes(ctx, activeSelector, "0", "")
	return nodes, err
}

// listBinding lists the claims that bind a node publishing limits own:
// the active ones, and the waiting ones that publish other limits. Two
// Lists, the second at the first one's resourceVersion exactly, so that
// together they are one snapshot: consistent, or from the API server's
// cache. It returns that resourceVersion.
func (l *Lock) listBinding(ctx context.Context, own claim.Limits, consistent bool) ([]*corev1.Node, string, error) {
	rv := "0"
	if consistent {
		rv = ""
	}
	active, at, err := l.listNodes(ctx, activeSelector, rv, "")
	if err != nil {
		return nil, "", err
	}
	other, _, err := l.listNodes(ctx, otherLimitsSelector(own), at, metav1.ResourceVersionMatchExact)
	if err != nil {
		return nil, "", err
	}
	return append(active, other...), at, nil
}

// otherLimitsSelector selects the waiting claims that publish other
// limits than own, and those without the digest label.
func otherLimitsSelector(own claim.Limits) string {
	return claim.Label + "=" + string(claim.Waiting) + "," + claim.LimitsLabel + "!=" + claim.LimitsDigest(own)
}

// listNodes lists the Nodes that selector selects, at resourceVersion rv
// with match, and returns the List's resourceVersion. With Metadata it
// reads their metadata only, which is where the claims are: a whole Node
// is several times larger, and a queue of hundreds read by each of its
// nodes a few times made most of the bytes the API server sent. Each is
// then taken as Ready unless read otherwise (applyReadiness, probeAhead):
// far back, a NotReady node ahead is then not passed over, which only
// makes this node wait for the window, where it is read; an entering node
// that verifies may give way to it, which is always safe.
func (l *Lock) listNodes(ctx context.Context, selector, rv string, match metav1.ResourceVersionMatch) ([]*corev1.Node, string, error) {
	var at string
	nodes, _, err := l.listAt(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, ResourceVersionMatch: match}, &at)
	return nodes, at, err
}

// listAt is one List: the Nodes, whether more remain (a page), and the
// List's resourceVersion in at (when not nil).
func (l *Lock) listAt(ctx context.Context, opts metav1.ListOptions, at *string) ([]*corev1.Node, bool, error) {
	var nodes []*corev1.Node
	if l.o.Metadata == nil {
		list, err := l.o.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, false, fmt.Errorf("list claimed nodes: %w", err)
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
		if at != nil {
			*at = list.ResourceVersion
		}
		return nodes, list.Continue != "", nil
	}
	list, err := l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, opts)
	if err != nil {
		return nil, false, fmt.Errorf("list claimed nodes: %w", err)
	}
	for i := range list.Items {
		nodes = append(nodes, queueNode(list.Items[i].ObjectMeta, corev1.ConditionTrue))
	}
	if at != nil {
		*at = list.ResourceVersion
	}
	return nodes, list.Continue != "", nil
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
// release. Further back it does not watch: it reads the claims nearest
// ahead of it, waits for the one whose leaving brings it near the front,
// and reads the active claims now and then (farBack).
func (l *Lock) waitEligible(ctx context.Context) error {
	var far farPace
	room, whole := false, false
	for {
		if room {
			room = false
			if admitted, err := l.takeRoom(ctx); err != nil || admitted {
				return err
			}
		}
		snap, partial, err := l.snapshot(ctx, whole)
		whole = false
		if err != nil {
			return err
		}
		now := l.o.Now()
		var counted []string
		if partial {
			// More than the window ahead, of which only the nearest
			// were read: the node waits for the mark among them.
			if counted = nearestAhead(snap, l.o.Node); len(counted) < l.window() {
				// Fewer that make a window (some cannot be read, or
				// are not waiting): read the whole queue ahead.
				l.log.Debug("fewer than the window among the nearest claims read; reading the whole queue ahead", "nearest", len(counted), "read", len(snap))
				whole = true
				continue
			}
			l.setStatus(Status{State: claim.Waiting, Position: len(counted), Far: true, Reason: "far back in the queue"})
			if l.current().state != claim.Waiting {
				return nil
			}
		} else {
			var done bool
			var probeIn time.Duration
			if counted, probeIn, done, err = l.look(ctx, snap, now); err != nil || done {
				return err
			}
			if probeIn < 0 {
				continue // a node ahead read as it is now
			}
			if len(counted) < l.window() {
				if l.watching() == nil {
					if err := l.ensureWatch(ctx); err != nil {
						return err
					}
					continue // look again from the fresh cache
				}
				// Re-check at least now and then: the grace for silent
				// nodes and the alarms are about time, not changes; and
				// when the readiness of a node ahead is due to be read.
				wait := l.jitter(min(l.o.WaitingGrace/4, 15*time.Second) + time.Second)
				for _, due := range []time.Duration{probeIn, l.currentView().rereadIn(now)} {
					if due > 0 {
						wait = min(wait, due)
					}
				}
				if err := l.waitChange(ctx, wait); err != nil {
					return err
				}
				continue
			}
		}
		if room, err = l.farBack(ctx, &far, snap, counted, partial, now); err != nil {
			return err
		}
	}
}

// farBack waits far back in the queue (waitFar), for the mark among
// counted (the waiting nodes ahead, at least the window's worth), and
// reports whether a slot has stayed free that this node could take: then
// it reads the queue ahead that may take it (takeRoom). If the mark left,
// this node is most likely within the window, where it watches: the
// watch's List is the read of the queue.
func (l *Lock) farBack(ctx context.Context, far *farPace, snap []claim.Participant, counted []string, partial bool, read time.Time) (room bool, err error) {
	window := l.window()
	l.stopWatch()
	mark := markOf(snap, counted[len(counted)-window])
	// How many places the mark has to go; not known when only the
	// nearest were read.
	ahead := len(counted) - window + 1
	if partial {
		ahead = 0
	}
	left, room, err := l.waitFar(ctx, far, ahead, mark, read, snap)
	if err != nil || !left || room {
		// Room: takeRoom reads what decides, which no watch serves
		// (its read is not the queue's view).
		return room, err
	}
	far.roomAt = time.Time{}
	return room, l.ensureWatch(ctx)
}

// look decides from a snapshot of the whole queue ahead: done when this
// node is admitted (or no longer waiting); else the waiting nodes ahead
// that are not passed over, and when a node ahead is due to be read
// (negative: one was read now, look again).
func (l *Lock) look(ctx context.Context, snap []claim.Participant, now time.Time) (counted []string, probeIn time.Duration, done bool, err error) {
	server := l.o.ServerNow()
	q := claim.EligibilityUpTo(snap, server, l.o.TTL, l.silent(now), l.o.Node)
	l.noteEligible(q, now)
	l.raiseAlarms(ctx, snap, server, reportsAlarms(q, l.o.Node))
	if q.Eligible(l.o.Node) {
		return nil, 0, true, nil
	}
	read, probeIn := l.probeAhead(ctx, l.currentView(), q, now, false)
	if read {
		return nil, -1, false, nil
	}
	reason := q.Blocked[l.o.Node]
	if reason == "" {
		reason = "waiting for the nodes ahead"
	}
	pos := q.Position(l.o.Node)
	l.setStatus(Status{State: claim.Waiting, Position: pos, Reason: reason})
	if l.current().state != claim.Waiting {
		return nil, 0, true, nil
	}
	// Far back counts only the waiting nodes ahead that are not passed
	// over (NotReady, silent): a front of dead nodes must not keep every
	// other node far back.
	for _, n := range q.Waiting[:max(pos, 0)] {
		if _, skipped := q.Skipped[n]; !skipped {
			counted = append(counted, n)
		}
	}
	return counted, probeIn, false, nil
}

// nearestAhead are the waiting claims of a partial snapshot other than
// self's, in queue order: the nearest ahead of self.
func nearestAhead(snap []claim.Participant, self string) []string {
	var ahead []claim.Participant
	for _, p := range snap {
		if p.Name != self && p.Err == nil && p.Claim.State == claim.Waiting {
			ahead = append(ahead, p)
		}
	}
	slices.SortFunc(ahead, claim.QueueOrder)
	names := make([]string, len(ahead))
	for i, p := range ahead {
		names[i] = p.Name
	}
	return names
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
