package lock

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sync"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// The queue is read as metadata (labels and annotations hold the claims):
// a whole Node is several times larger, and every claim change of a
// queue of hundreds reached each node near its front. Metadata has no
// Ready condition, so readiness is read apart, only where it decides
// something: a waiting node ahead that the queue lets go is taken as
// Ready, and if it has not announced within readyProbe, its Node is read
// (a GET from the API server's cache). A node read NotReady is passed
// over until a read shows it Ready again.
const (
	// readyProbe is how long a waiting node ahead may be let go without
	// announcing before its readiness is read: a Ready node's daemon
	// announces within tens of milliseconds, a second under load.
	readyProbe = time.Second
	// readyReprobe is how often such a node is read again while it still
	// has not announced; a NotReady one, while it waits ahead.
	readyReprobe = 5 * time.Second
)

// readiness is what this daemon last read of other nodes' Ready
// condition.
type readiness struct {
	mu   sync.Mutex
	read map[string]readyRead
}

type readyRead struct {
	ready bool
	at    time.Time
}

func (r *readiness) note(name string, ready bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.read == nil {
		r.read = map[string]readyRead{}
	}
	r.read[name] = readyRead{ready: ready, at: at}
}

// touch records a read that failed: the readiness stays as it was (Ready
// if unknown), and the next read waits readyReprobe.
func (r *readiness) touch(name string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.read == nil {
		r.read = map[string]readyRead{}
	}
	x, ok := r.read[name]
	if !ok {
		x.ready = true
	}
	x.at = at
	r.read[name] = x
}

func (r *readiness) last(name string) (readyRead, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x, ok := r.read[name]
	return x, ok
}

// forget drops the reads of nodes no longer in the queue.
func (r *readiness) forget(keep func(string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.read {
		if !keep(name) {
			delete(r.read, name)
		}
	}
}

// applyReadiness marks NotReady the participants last read so, when the
// queue was read as metadata (whole Nodes carry their own condition), and
// the waiting ones whose daemon marked itself stopped (passStopped).
func (l *Lock) applyReadiness(ps []claim.Participant) []claim.Participant {
	for i, p := range ps {
		if p.Name == l.o.Node {
			continue
		}
		if stopped(p) {
			ps[i].Ready = false
		}
		if l.o.Metadata == nil {
			continue
		}
		if r, ok := l.ready.last(p.Name); ok && !r.ready {
			ps[i].Ready = false
		}
	}
	return ps
}

// stopped reports whether p is a waiting claim whose daemon marked it
// stopped (MarkStopped): it is passed over as a NotReady one is, at once,
// until its daemon is back and takes the mark off.
func stopped(p claim.Participant) bool {
	_, marked := p.Labels[queue.StoppedLabel]
	return marked && p.Err == nil && p.Claim.State == claim.Waiting
}

// probeAhead reads the readiness of each waiting node ahead of this one that
// the queue lets go but that has not announced for readyProbe (at once if
// eager: the slot has been seen free for a while already), and again
// every readyReprobe while it still has not, and of each one last read
// NotReady, every readyReprobe. It reports whether a node was read, and
// when the next read is due (0: none).
func (l *Lock) probeAhead(ctx context.Context, q claim.Queue, now time.Time, eager bool) (read bool, next time.Duration) {
	if l.o.Metadata == nil {
		return false, 0 // whole Nodes carry their readiness
	}
	l.mu.Lock()
	first := copyTimes(l.firstEligible)
	l.mu.Unlock()
	waiting := map[string]bool{}
	for _, n := range q.Waiting {
		waiting[n] = true
	}
	l.ready.forget(func(n string) bool { return waiting[n] })
	for _, n := range q.Waiting {
		if n == l.o.Node {
			break
		}
		r, known := l.ready.last(n)
		due, probe := probeDue(r, known, q.Eligible(n), first[n], eager, now)
		if !probe {
			continue
		}
		if wait := due.Sub(now); wait > 0 {
			next = sooner(next, wait)
			continue
		}
		if l.readReady(ctx, n) {
			read = true
		}
		next = sooner(next, readyReprobe)
	}
	return read, next
}

// probeDue says whether a waiting node ahead is one to read the readiness
// of, and when: one last read NotReady, readyReprobe after that read; one
// the queue lets go since first (zero: not let go), readyProbe after
// that (now if eager), and readyReprobe after its last read.
func probeDue(r readyRead, known, eligible bool, first time.Time, eager bool, now time.Time) (time.Time, bool) {
	switch {
	case known && !r.ready:
		return r.at.Add(readyReprobe), true
	case !eligible || first.IsZero():
		return time.Time{}, false
	}
	due := first.Add(readyProbe)
	if eager {
		due = now
	}
	if known {
		due = maxTime(due, r.at.Add(readyReprobe))
	}
	return due, true
}

// sooner is the sooner of two waits, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// readReady reads node name's readiness (a GET from the API server's
// cache); it reports whether the read succeeded. A node gone is taken as
// Ready: the watch tells its claim is gone.
func (l *Lock) readReady(ctx context.Context, name string) bool {
	node, err := l.o.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
		l.ready.note(name, true, l.o.Now())
		return true
	case err != nil:
		l.ready.touch(name, l.o.Now())
		l.log.Debug("cannot read a node of the queue", "node", name, "err", err)
		return false
	}
	l.ready.note(name, nodeReady(node), l.o.Now())
	return true
}
