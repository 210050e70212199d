package lock

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kured-host/kured-host/daemon/claim"
)

// waitFar waits, far back in the queue, until this node may have come
// within the window, and reports whether the mark has left, and whether a
// slot has stayed free that this node could take were the nodes ahead of
// it gone. Reading the whole queue costs a response the size of the
// queue, and every waiting node reading it on each wake-up made a long
// queue's bytes grow with its square (0.5 MB a read, 2.8 GB in all at 500
// nodes); polling in between came late, and a node that comes to the
// front asleep idles a slot until the others pass it over. So it watches
// one node, the mark: the waiting node whose leaving, with the queue going
// in order, brings this one within the window. The queue is read again
// when the mark has left, or when at the fastest pace seen this node
// should be within the window by now (a mark held back by its group, or
// passed over, stays), or, while the pace is not known, after a minute:
// the read when the mark leaves measures the pace over the whole wait,
// where reads every few seconds from the start measured a start slowed by
// every node joining at once (and made it slower). ahead is how many
// places the mark has to go, 0 when not known: far back in a long queue a
// node reads only the nodes nearest ahead of it (readQueue); it then reads
// again when the mark leaves, when the active claims leave room, or after
// a minute.
func (l *Lock) waitFar(ctx context.Context, far *farPace, ahead int, mark participantMark, read time.Time, snap []claim.Participant) (left, room bool, err error) {
	d := far.next(ahead, read)
	l.log.Debug("far back in the queue", "ahead", ahead, "mark", mark.name, "next_read_in", d)
	if mark.name == "" {
		return false, false, sleep(ctx, d)
	}
	// The nodes ahead may be held back by their group (a full zone) while
	// this one's is free: then the mark does not move, and a slot freed
	// elsewhere is this node's to take. The active claims are few: they
	// are read now and then (farPoll); if they leave room for this node,
	// and still do a moment later (a slot between two holders is taken
	// within a second near the front), the queue is read.
	//
	// The reads keep the last wait's schedule: a wait that ended (its
	// time up, the queue read again) and started the schedule afresh put
	// 47 s between two reads (the simulator's seed 58), past the bound.
	// A room seen by the last wait's last read is confirmed by this one's
	// first: waits of a second, their time up, never saw the room twice
	// (the regression L3).
	pollIn := l.jitter(farPoll)
	if !far.nextPoll.IsZero() {
		pollIn = max(far.nextPoll.Sub(l.o.Now()), 0)
	}
	poll := time.NewTimer(pollIn)
	defer poll.Stop()
	schedule := func(d time.Duration) {
		far.nextPoll = l.o.Now().Add(d)
		poll.Reset(d)
	}
	view := newQueueView(snap, l.o.Now())
	timeout := time.Minute
	if far.perPosition > 0 && ahead > 0 {
		timeout = farBounds(far.eta(ahead))
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := l.watchMark(wctx, mark.name)
	if err != nil {
		// Not worth a warning: paced reads of the queue do the job,
		// and report the API's errors if they last.
		l.log.Debug("cannot watch the mark; reading the queue at a pace instead", "mark", mark.name, "err", err)
		return false, false, sleep(ctx, d)
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return false, false, context.Cause(ctx)
			}
			return false, false, nil // the time is up: read the queue
		case <-poll.C:
			if !l.roomNow(ctx, view) {
				far.roomAt = time.Time{}
				schedule(l.jitter(farPoll))
				continue
			}
			now := l.o.Now()
			if !far.roomAt.IsZero() && now.Sub(far.roomAt) >= roomConfirm {
				l.log.Debug("far back: a slot has stayed free; reading the queue")
				// That read answers for this poll: the next comes
				// on the usual schedule.
				far.nextPoll, far.roomAt = now.Add(l.jitter(farPoll)), time.Time{}
				return true, true, nil
			}
			if far.roomAt.IsZero() {
				far.roomAt = now
			}
			schedule(l.jitter(roomConfirm))
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, false, nil
			}
			if ev.Type == watch.Deleted {
				return true, false, nil
			}
			if m, ok := ev.Object.(metav1.Object); ok && markLeft(m, mark) {
				return true, false, nil
			}
		}
	}
}

// farPoll is how often a node far back in the queue reads the active
// claims: with the read, within 2·farPoll + 2·roomConfirm of a slot freed
// that it may take (the bound docs/claims.md states).
const farPoll = 15 * time.Second

// roomConfirm is how long the active claims must leave room for this node
// before it reads the queue: near the front, a freed slot is taken within
// a second, so that room seen twice this far apart is room the nodes ahead
// do not take (held back by their group, NotReady, gone).
const roomConfirm = time.Second

// activeSelector selects the nodes whose claim takes a slot: every claim
// label but waiting (an unknown value counts as holding).
var activeSelector = claim.Label + "," + claim.Label + "!=" + string(claim.Waiting)

// room works out whether this node would be admitted if no waiting node
// were ahead of it: the active claims read now, this node, and the claims
// of the last read that cannot be read or are not believed (they bind
// every node; rereadDistrusted keeps them fresh). The true queue admits
// this node only if this view does, so that no room here is no slot
// idling for it.
func (v *queueView) room(l *Lock, active []claim.Participant) claim.Queue {
	view := make([]claim.Participant, 0, len(active)+4)
	for _, p := range v.snap {
		if p.Name == l.o.Node || (p.Err != nil && !v.went[p.Name]) {
			view = append(view, p)
		}
	}
	view = append(view, active...)
	return claim.EligibilityUpTo(view, l.o.ServerNow(), l.o.TTL, l.silent(l.o.Now()), l.o.Node)
}

// roomNow reads the active claims and reports whether, with them in place
// of those of the last read of the queue, and no waiting node ahead, this
// node would be admitted. A failed read says no: the next one, or the
// mark, tells.
func (l *Lock) roomNow(ctx context.Context, v *queueView) bool {
	nodes, err := l.listActive(ctx)
	if err != nil {
		return false
	}
	active := l.distrust(Participants(nodes, l.o.ServerNow(), l.o.ClockTolerance))
	for _, a := range active {
		// Seen active: what an earlier read showed of it is past.
		v.went[a.Name] = true
	}
	l.rereadDistrusted(ctx, v, true)
	q := v.room(l, active)
	l.log.Debug("far back: the active claims read", "active", len(active), "room", q.Eligible(l.o.Node), "blocked_by", q.Blocked[l.o.Node])
	return q.Eligible(l.o.Node)
}

// takeRoom reads, when the active claims have left room for this node far
// back a while, the queue that may take that room before it (roomQueue),
// and reports whether the queue admits this node. The nodes ahead that
// it lets go but that have not gone are read at once (probeAhead, eager):
// NotReady, or with their daemon gone, they are passed over, and a front
// of them would otherwise keep every node behind far back.
func (l *Lock) takeRoom(ctx context.Context) (bool, error) {
	snap, page, err := l.roomQueue(ctx)
	if err != nil || snap == nil {
		return false, err
	}
	now := l.o.Now()
	v := newQueueView(snap, now)
	for probed := false; ; probed = true {
		ps := l.distrust(l.applyReadiness(slices.Clone(v.snap)))
		if !probed {
			l.raiseAlarms(ctx, ps, l.o.ServerNow(), false)
		}
		q := claim.EligibilityUpTo(ps, l.o.ServerNow(), l.o.TTL, l.silent(now), l.o.Node)
		l.noteEligible(q, now)
		l.log.Debug("far back: the queue that may take the room read", "claims", len(ps), "page", page, "admitted", q.Eligible(l.o.Node), "blocked_by", q.Blocked[l.o.Node])
		// A page admits nothing: it showed this node crowded out, and
		// a node ahead read NotReady since may have changed that. The
		// next room seen reads again.
		if q.Eligible(l.o.Node) && !page {
			// Verify's check that no node ahead may go first reads
			// the claims that bind this node afresh, the others here.
			v.filtered = true
			l.setView(v)
			return true, nil
		}
		if read, _ := l.probeAhead(ctx, v, q, now, true); !read || probed {
			return false, nil
		}
	}
}

// roomQueue reads what decides whether the queue admits this node, far
// back, to room that the active claims leave it: the claims that bind it
// (listBinding) and, at the same revision, the waiting claims ahead of it
// but those in the groups the former fill by themselves (claim.Full: such
// a claim is kept out whatever else the queue holds, and the slot freed
// is in another group). The whole queue ahead was a response the size of
// the queue, read by every node far back in the free group at once: with
// one zone full and a slot free in another, thousands of nodes of the
// other zone read the queue (a 5,000-node roll of the simulator stalled
// there, its memory at 10 GB). Read this way it is the nodes of the free
// groups ahead. Kept only for verify when the node announces
// (queueView.filtered). Nil when this node is not waiting.
//
// Even so, with a zone full at 5,000 nodes, each node far back in the
// other zones read the hundreds to thousands of their claims ahead of it
// (0.8 MB a read, 2.9 GB over the roll's first 80 minutes). So it first
// reads a page of them (roomPage): if the page alone shows this node
// kept out (claim.Crowded: enough claims ahead that go first or would
// stop it too), that is the answer, and page is true; if not, it reads
// the rest.
func (l *Lock) roomQueue(ctx context.Context) (snap []claim.Participant, page bool, err error) {
	cur := l.current()
	if cur.err != nil || cur.claim.Since.IsZero() || cur.state != claim.Waiting {
		return nil, false, nil
	}
	binding, at, err := l.listBinding(ctx, cur.claim.Limits, false)
	if err != nil {
		return nil, false, err
	}
	var parse claimCache // not kept: the read is this call's
	bound := l.withOwn(l.distrust(l.applyReadiness(parse.participants(binding))), cur)
	selector := claim.AheadSelector(cur.claim.Since) + excludeSelector(claim.Full(bound, l.o.ServerNow(), l.o.TTL))
	read := func(limit int64) ([]claim.Participant, bool, error) {
		ahead, more, err := l.listPage(ctx, selector, at, limit)
		if err != nil {
			return nil, false, err
		}
		// This node's place is level with itself: it is among them.
		ahead = slices.DeleteFunc(besides(binding, ahead), func(n *corev1.Node) bool { return n.Name == l.o.Node })
		return append(slices.Clone(bound), parse.participants(ahead)...), more, nil
	}
	snap, more, err := read(int64(roomPage * l.window()))
	if err != nil || !more {
		return snap, false, err
	}
	ps := l.distrust(l.applyReadiness(slices.Clone(snap)))
	if claim.Crowded(ps, l.o.Node, l.o.ServerNow(), l.o.TTL, l.silent(l.o.Now())) {
		return snap, true, nil
	}
	snap, _, err = read(0)
	return snap, false, err
}

// roomPage is how many windows' worth of claims ahead roomQueue reads
// first: 64 at concurrency 10, of which about half in this node's zone
// (with one of three zones full), where a group limit's room is a few.
const roomPage = 4

// excludeSelector is the label selector's terms ("," first) that leave
// out the nodes labelled with the values of full, by label. A label or
// value that cannot be selected (a claim written by another hand may
// publish any) is left in: the read is larger, and decides the same.
func excludeSelector(full map[string][]string) string {
	var b strings.Builder
	for _, label := range slices.Sorted(maps.Keys(full)) {
		if len(validation.IsQualifiedName(label)) > 0 {
			continue
		}
		values := slices.DeleteFunc(slices.Clone(full[label]), func(v string) bool {
			return v == "" || len(validation.IsValidLabelValue(v)) > 0
		})
		if len(values) > 0 {
			fmt.Fprintf(&b, ",%s notin (%s)", label, strings.Join(values, ","))
		}
	}
	return b.String()
}

// watchMark watches one Node's metadata, from its current state.
func (l *Lock) watchMark(ctx context.Context, name string) (watch.Interface, error) {
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: "0"}
	if l.o.Metadata != nil {
		return l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).Watch(ctx, opts)
	}
	return l.o.Client.CoreV1().Nodes().Watch(ctx, opts)
}

// participantMark is a waiting node as one read of the queue saw it.
type participantMark struct {
	name  string
	since time.Time
}

func markOf(snap []claim.Participant, name string) participantMark {
	for _, p := range snap {
		if p.Name == name {
			return participantMark{name: name, since: p.Claim.Since}
		}
	}
	return participantMark{}
}

// markLeft reports whether the mark is no longer waiting in the place it
// had: no claim, another state, or a new place (it left and came back).
func markLeft(n metav1.Object, m participantMark) bool {
	c, err := claim.Parse(n.GetLabels()[claim.Label], n.GetAnnotations()[claim.Annotation])
	return err != nil || c.State != claim.Waiting || !c.Since.Equal(m.since)
}

// window is how many of the first waiting nodes watch: the next round
// (concurrency) and windowSpare more, so that the next ones to go hear of
// a freed slot at once, with room for nodes passed over or blocked by a
// full group; and never fewer than 16, so that in most clusters every
// waiting node watches and the slots go strictly in queue order; only
// long queues pace their tails. Each watching node receives every change
// of every active claim (about eight a slot, each a Node's metadata), so
// the window is what a node pays near the front: twice the concurrency,
// 22 at 10, made a node of a 500-node roll receive half as much again as
// one of a 50-node roll at 5 (`make bench`), for nodes the next round
// never reaches.
func (l *Lock) window() int { return max(max(l.ownLimits().Concurrency, 1)+windowSpare, minWindow) }

// windowSpare is how many waiting nodes beyond the next round watch: a
// slot freed in a group whose next waiting node is further back than
// this is found by the nodes far back within 2·farPoll + 2·roomConfirm
// (roomNow), or as soon as the window moves on.
const windowSpare = 6

const minWindow = 16

// farPace measures, for a node further back than the window, the fastest
// pace the queue has moved between two of its reads (a queue slowed by a
// busy start speeds up later, and a pace measured across the start is
// slow: reading early costs a read, reading late idles a slot), and
// spaces the reads when the mark cannot be watched: while the queue has
// not been seen to move, doubling from 2 s up to a minute; then a quarter
// of the time it needs to reach the window at that pace. Between 1 s and
// 30 min. A read that does not say how many are ahead (0) does not
// measure.
type farPace struct {
	ahead       int
	at          time.Time
	interval    time.Duration
	perPosition time.Duration // fastest seen; 0 until the queue moved
	nextPoll    time.Time     // when the active claims are next read (waitFar)
	roomAt      time.Time     // when they were first read to leave room, and have since
}

func (f *farPace) next(ahead int, now time.Time) time.Duration {
	if ahead > 0 && !f.at.IsZero() && f.ahead > ahead && now.After(f.at) {
		p := now.Sub(f.at) / time.Duration(f.ahead-ahead)
		if f.perPosition == 0 || p < f.perPosition {
			f.perPosition = p
		}
	}
	var d time.Duration
	switch {
	case f.perPosition > 0 && ahead > 0:
		d = f.eta(ahead) / 4
	case f.interval == 0:
		d = 2 * time.Second
	default:
		d = min(2*f.interval, time.Minute)
	}
	d = farBounds(d)
	if ahead > 0 {
		f.ahead, f.at = ahead, now
	}
	f.interval = d
	return d
}

// eta is the time to move ahead places at the fastest pace seen.
func (f *farPace) eta(ahead int) time.Duration { return f.perPosition * time.Duration(ahead) }

// farBounds keeps a far-back wait between 1 s and 30 min.
func farBounds(d time.Duration) time.Duration { return min(max(d, time.Second), 30*time.Minute) }
