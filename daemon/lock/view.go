package lock

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
)

// queueView is the queue as this node last read it (readQueue: the
// claims that bind it and the waiting ones ahead of it), kept up to date
// between reads: the active claims come from a watch of them (near the
// front) or a read of them (far back), the nodes seen active since the
// read are known to have left their place, and the nodes ahead that the
// queue lets go but that do not go are read one by one (probeAhead). A
// whole read of the queue is a response the size of the queue, and the
// watch of every claimed node brought every change of a queue of
// hundreds to each node near its front: their bytes grew with the square
// of the queue.
type queueView struct {
	snap []claim.Participant
	at   time.Time
	// went are the waiting nodes of snap seen active since.
	went map[string]bool
	// distrustedAt is when the claims of snap that cannot be read or are
	// not believed were last read again; distrusted, whether there was one.
	distrustedAt time.Time
	distrusted   bool
	// filtered: the read left out the claims of groups full by the
	// active claims alone (roomQueue). Verify's fairness check may use
	// it; the watch near the front may not, since a group that frees
	// lets those claims go first.
	filtered bool
}

// viewMaxAge is how long a view serves near the front before the queue is
// read whole again: the nodes that joined ahead of this one since (a paced
// join keeps the moment of need, which can be earlier than this node's)
// and the limits the waiting ones publish are seen at least this often.
const viewMaxAge = 5 * time.Minute

func newQueueView(snap []claim.Participant, at time.Time) *queueView {
	return &queueView{snap: slices.Clone(snap), at: at, went: map[string]bool{}}
}

func (l *Lock) currentView() *queueView {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.view
}

func (l *Lock) setView(v *queueView) {
	l.mu.Lock()
	l.view = v
	l.mu.Unlock()
}

// withRead is the queue: the claims read now by listBinding(own)
// (the active ones, and the waiting ones that publish other limits than
// own) in place of what the view has of those nodes, and the waiting
// claims of the view that this selector leaves out, not seen active since.
// A claim of the view the selector would select but the read does not
// show has changed since: the read is right. The view learns of the
// active ones.
func (v *queueView) withRead(read []claim.Participant, own claim.Limits) []claim.Participant {
	digest := claim.LimitsDigest(own)
	fresh := map[string]bool{}
	for _, p := range read {
		fresh[p.Name] = true
		if p.Claim.State != claim.Waiting {
			v.went[p.Name] = true
		}
	}
	ps := make([]claim.Participant, 0, len(v.snap)+len(read))
	for _, p := range v.snap {
		if p.Claim.State == claim.Waiting && p.Labels[claim.LimitsLabel] == digest && !v.went[p.Name] && !fresh[p.Name] {
			ps = append(ps, p)
		}
	}
	return append(ps, read...)
}

// update replaces node name's participant in the view with what a read of
// its Node showed (none: it has no claim any more). A node read waiting is
// in its place again.
func (v *queueView) update(name string, p []claim.Participant) {
	v.snap = slices.DeleteFunc(v.snap, func(q claim.Participant) bool { return q.Name == name })
	v.snap = append(v.snap, p...)
	delete(v.went, name)
}

// distrustedEvery is how often, near the front, the claims of the view
// that cannot be read or are not believed are read again.
const distrustedEvery = 10 * time.Second

// rereadDistrusted reads again each claim of the view that cannot be read
// or is not believed and has not been seen active since the view's read
// (one seen active is read with the active claims): every
// distrustedEvery, or now if force. Such a claim binds every node to
// concurrency 1 until an admin fixes or removes it, as its alarm says to;
// kept from the last read of the queue, its removal freed nothing until
// the next (CI's seeds 700, 703 and 997: a slot idle 41 s). That includes
// one whose label says active: absent from the active claims read since,
// it has been fixed (the daemon of a waiting node whose label an admin
// set to entering starts over) or removed, and kept as read it held a
// node far back to concurrency 1 until its next read of the queue, a
// minute (CI's seed 700 again; the regression L3c). They are few, each an
// alarm, so each is a GET from the cache.
func (l *Lock) rereadDistrusted(ctx context.Context, v *queueView, force bool) {
	now := l.o.Now()
	if !force && now.Sub(v.distrustedAt) < distrustedEvery {
		return
	}
	v.distrustedAt, v.distrusted = now, false
	for _, p := range slices.Clone(v.snap) {
		if p.Name == l.o.Node || v.went[p.Name] {
			continue
		}
		if q := l.distrust([]claim.Participant{p}); q[0].Err == nil {
			continue
		}
		l.readInto(ctx, v, p.Name)
		v.distrusted = true
	}
}

// rereadIn is how long until the view's distrusted claims are due to be
// read again (0: there are none).
func (v *queueView) rereadIn(now time.Time) time.Duration {
	if v == nil || !v.distrusted {
		return 0
	}
	return max(v.distrustedAt.Add(distrustedEvery).Sub(now), time.Millisecond)
}

// readInto reads node name (a GET from the API server's cache) into the
// view, and its readiness; it reports whether the read succeeded.
func (l *Lock) readInto(ctx context.Context, v *queueView, name string) bool {
	node, err := l.o.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
		// Taken as Ready: whatever a read of the queue from a cache
		// behind still shows of it, it is not read again before
		// readyReprobe.
		l.ready.note(name, true, l.o.Now())
		v.update(name, nil)
		return true
	case err != nil:
		l.ready.touch(name, l.o.Now())
		l.log.Debug("cannot read a node of the queue", "node", name, "err", err)
		return false
	}
	l.ready.note(name, nodeReady(node), l.o.Now())
	qn := queueNode(node.ObjectMeta, readyStatus(node))
	var none claimCache
	v.update(name, none.participants([]*corev1.Node{qn}))
	return true
}
