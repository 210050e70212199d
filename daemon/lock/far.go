package lock

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kured-host/kured-host/daemon/claim"
)

// waitFar waits, far back in the queue, until this node may have come
// within the window, and reports whether the mark has left. Reading the
// whole queue costs a response the size of the queue, and every waiting
// node reading it on each wake-up made a long queue's bytes grow with its
// square (0.5 MB a read, 2.8 GB in all at 500 nodes); polling in between
// came late, and a node that comes to the front asleep idles a slot until
// the others pass it over. So it watches one node, the mark: the waiting
// node whose leaving, with the queue going in order, brings this one
// within the window. The queue is read again when the mark has left, or
// when at the fastest pace seen this node should be within the window by
// now (a mark held back by its group, or passed over, stays), or, while
// the pace is not known, after a minute: the read when the mark leaves
// measures the pace over the whole wait, where reads every few seconds
// from the start measured a start slowed by every node joining at once
// (and made it slower).
func (l *Lock) waitFar(ctx context.Context, far *farPace, ahead int, mark participantMark, read time.Time, snap []claim.Participant) (bool, error) {
	d := far.next(ahead, read)
	l.log.Debug("far back in the queue", "ahead", ahead, "mark", mark.name, "next_read_in", d)
	if mark.name == "" {
		return false, sleep(ctx, d)
	}
	// The nodes ahead may be held back by their group (a full zone) while
	// this one's is free: then the mark does not move, and a slot freed
	// elsewhere is this node's to take. The active claims are few: they
	// are read now and then (farPoll), and, when they changed, the queue
	// is worked out again from the last read with them; a full read
	// follows only if this node may now go.
	poll := time.NewTimer(l.jitter(farPoll))
	defer poll.Stop()
	view := newFarView(snap)
	timeout := time.Minute
	if far.perPosition > 0 {
		timeout = farBounds(far.eta(ahead))
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := l.watchMark(wctx, mark.name)
	if err != nil {
		// Not worth a warning: paced reads of the queue do the job,
		// and report the API's errors if they last.
		l.log.Debug("cannot watch the mark; reading the queue at a pace instead", "mark", mark.name, "err", err)
		return false, sleep(ctx, d)
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return false, context.Cause(ctx)
			}
			return false, nil // the time is up: read the queue
		case <-poll.C:
			if l.mayGoNow(ctx, view) {
				return true, nil
			}
			poll.Reset(l.jitter(farPoll))
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			if ev.Type == watch.Deleted {
				return true, nil
			}
			if m, ok := ev.Object.(metav1.Object); ok && markLeft(m, mark) {
				return true, nil
			}
		}
	}
}

// farPoll is how often a node far back in the queue reads the active
// claims: with the read, within 2·farPoll of a slot freed that it may
// take (the bound docs/claims.md states).
const farPoll = 15 * time.Second

// activeSelector selects the nodes whose claim takes a slot.
var activeSelector = claim.Label + " in (" + string(claim.Entering) + "," + string(claim.Holding) + ")"

// farView is what a node far back knows between two reads of the queue:
// the last read, the nodes seen active since, and the readiness of the
// nodes ahead that seemed to hold it up.
type farView struct {
	snap []claim.Participant
	// went are the nodes waiting in snap seen active since: a reboot
	// takes minutes, far longer than farPoll, so a node that took a slot
	// and gave it back has been seen.
	went map[string]bool
	// read are the waiting nodes ahead that the view let go while this
	// node could not, each read once since (its claim may have changed
	// between two reads of the active claims: removed and joined again
	// behind; and a read of metadata does not show readiness).
	read map[string]bool
	// letGo are the nodes read that the view let go at the last read of
	// the active claims. A Ready node let go takes its slot within a
	// second, so one still not active at the next read did not go as
	// read: an admin removed its claim, or its machine failed, between
	// the two reads. It is read again.
	letGo map[string]bool
}

func newFarView(snap []claim.Participant) *farView {
	return &farView{snap: slices.Clone(snap), went: map[string]bool{}, read: map[string]bool{}, letGo: map[string]bool{}}
}

// update replaces node name's participant in the view with what a read of
// its Node showed (none: it has no claim any more).
func (v *farView) update(name string, p []claim.Participant) {
	v.snap = slices.DeleteFunc(v.snap, func(q claim.Participant) bool { return q.Name == name })
	v.snap = append(v.snap, p...)
}

// queue works out the queue from the last read with the active claims
// read now.
func (v *farView) queue(l *Lock, active []claim.Participant) claim.Queue {
	view := make([]claim.Participant, 0, len(v.snap)+len(active))
	for _, p := range v.snap {
		if p.Claim.State == claim.Waiting && (!v.went[p.Name] || v.read[p.Name]) {
			view = append(view, p)
		}
	}
	view = append(view, active...)
	return claim.EligibilityUpTo(view, l.o.ServerNow(), l.o.TTL, l.silent(l.o.Now()), l.o.Node)
}

// mayGoNow reads the active claims and reports whether, with them in
// place of those of the last read of the queue, this node would be
// eligible. Waiting nodes ahead that the view lets go take the free slots,
// unless they are NotReady or no longer where the view has them: each is
// read once (a GET from the API server's cache), its claim and readiness
// taken from the read, so that a NotReady one is passed over as the nodes
// that watch pass it over. A failed read says no: the next one, or the
// mark, tells.
func (l *Lock) mayGoNow(ctx context.Context, v *farView) bool {
	opts := metav1.ListOptions{LabelSelector: activeSelector, ResourceVersion: "0"}
	var nodes []*corev1.Node
	if l.o.Metadata != nil {
		list, err := l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, opts)
		if err != nil {
			return false
		}
		for i := range list.Items {
			nodes = append(nodes, queueNode(list.Items[i].ObjectMeta, corev1.ConditionTrue))
		}
	} else {
		list, err := l.o.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return false
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
	}
	active := l.distrust(Participants(nodes, l.o.ServerNow(), l.o.ClockTolerance))
	for _, a := range active {
		// Seen active: what an earlier read showed of it is past.
		v.went[a.Name] = true
		delete(v.read, a.Name)
	}
	for n := range v.letGo {
		delete(v.read, n) // not active: the read is past too
	}
	clear(v.letGo)
	l.rereadDistrusted(ctx, v)
	q := v.queue(l, active)
	// Until the view lets no unread node go ahead of this one: a node
	// read and found elsewhere (it left and joined again behind) frees
	// its place for the next stale one, which must be read now too, not
	// at the next poll (CI's seed 130: two such nodes, a slot idle 48 s).
	// Each node is read at most once a poll.
	for !q.Eligible(l.o.Node) {
		changed := false
		for _, n := range q.Waiting {
			if n == l.o.Node {
				break
			}
			if v.read[n] || !q.Eligible(n) {
				continue
			}
			v.read[n] = true
			node, err := l.o.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{ResourceVersion: "0"})
			if err != nil {
				continue
			}
			changed = true
			v.update(n, l.distrust(Participants([]*corev1.Node{queueNode(node.ObjectMeta, readyStatus(node))}, l.o.ServerNow(), l.o.ClockTolerance)))
		}
		if !changed {
			break
		}
		q = v.queue(l, active)
	}
	if !q.Eligible(l.o.Node) {
		for _, n := range q.Waiting {
			if n == l.o.Node {
				break
			}
			if v.read[n] && q.Eligible(n) {
				v.letGo[n] = true
			}
		}
	}
	l.log.Debug("far back: the active claims read", "active", len(active), "eligible", q.Eligible(l.o.Node), "blocked_by", q.Blocked[l.o.Node])
	return q.Eligible(l.o.Node)
}

// rereadDistrusted reads again each claim of the view that cannot be read
// or is not believed and is not active (its label says waiting, or
// nothing the List of active claims selects). Such a claim binds every
// node to concurrency 1 until an admin fixes or removes it, as its alarm
// says to; kept from the last read of the queue, its removal freed
// nothing here until the next (CI's seeds 700, 703 and 997: a slot idle
// 41 s). They are few, each an alarm, so each is a GET from the cache.
func (l *Lock) rereadDistrusted(ctx context.Context, v *farView) {
	for _, p := range slices.Clone(v.snap) {
		if p.Err == nil || p.Name == l.o.Node || v.went[p.Name] {
			continue
		}
		node, err := l.o.Client.CoreV1().Nodes().Get(ctx, p.Name, metav1.GetOptions{ResourceVersion: "0"})
		switch {
		case apierrors.IsNotFound(err):
			v.update(p.Name, nil)
		case err == nil:
			v.update(p.Name, l.distrust(Participants([]*corev1.Node{queueNode(node.ObjectMeta, readyStatus(node))}, l.o.ServerNow(), l.o.ClockTolerance)))
		}
	}
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

// window is how many of the first waiting nodes watch: enough that the
// next ones to go hear of a freed slot at once, with room for nodes passed
// over or blocked by a full group, and never fewer than 16, so that in
// most clusters every waiting node watches and the slots go strictly in
// queue order; only long queues pace their tails.
func (l *Lock) window() int { return max(2*max(l.ownLimits().Concurrency, 1)+2, minWindow) }

const minWindow = 16

// farPace measures, for a node further back than the window, the fastest
// pace the queue has moved between two of its reads (a queue slowed by a
// busy start speeds up later, and a pace measured across the start is
// slow: reading early costs a read, reading late idles a slot), and
// spaces the reads when the mark cannot be watched: while the queue has
// not been seen to move, doubling from 2 s up to a minute; then a quarter
// of the time it needs to reach the window at that pace. Between 1 s and
// 30 min.
type farPace struct {
	ahead       int
	at          time.Time
	interval    time.Duration
	perPosition time.Duration // fastest seen; 0 until the queue moved
}

func (f *farPace) next(ahead int, now time.Time) time.Duration {
	if !f.at.IsZero() && f.ahead > ahead && now.After(f.at) {
		p := now.Sub(f.at) / time.Duration(f.ahead-ahead)
		if f.perPosition == 0 || p < f.perPosition {
			f.perPosition = p
		}
	}
	var d time.Duration
	switch {
	case f.perPosition > 0:
		d = f.eta(ahead) / 4
	case f.interval == 0:
		d = 2 * time.Second
	default:
		d = min(2*f.interval, time.Minute)
	}
	d = farBounds(d)
	f.ahead, f.at, f.interval = ahead, now, d
	return d
}

// eta is the time to move ahead places at the fastest pace seen.
func (f *farPace) eta(ahead int) time.Duration { return f.perPosition * time.Duration(ahead) }

// farBounds keeps a far-back wait between 1 s and 30 min.
func farBounds(d time.Duration) time.Duration { return min(max(d, time.Second), 30*time.Minute) }
