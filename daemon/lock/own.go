package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/queue"
)

// ownClaim is the node's claim as this daemon last read or wrote it.
type ownClaim struct {
	uid         types.UID
	rv          string
	state       claim.State // "" for none
	claim       claim.Claim
	err         error // why the claim cannot be read; nil if it can
	labels      map[string]string
	annotations map[string]string
	// unschedulable is the Node's spec.unschedulable at schedRV, the
	// last version read whole (a watch of metadata moves rv alone).
	unschedulable bool
	schedRV       string
	// at is when this daemon read or wrote the Node at rv (its own clock).
	at time.Time
}

// participant is this node in the queue as its daemon knows it: always
// Ready, since the daemon asking is running.
func (c ownClaim) participant(node string) claim.Participant {
	return claim.Participant{Name: node, Labels: c.labels, Ready: true, Claim: c.claim}
}

// Own reads the node's claim with a consistent GET (never a cache) and
// remembers it as the base of the next conditional write.
func (l *Lock) Own(ctx context.Context) (claim.Claim, claim.State, error) {
	n, err := l.o.Client.CoreV1().Nodes().Get(ctx, l.o.Node, metav1.GetOptions{})
	if err != nil {
		return claim.Claim{}, "", fmt.Errorf("read own node %s: %w", l.o.Node, err)
	}
	c, s, err := l.remember(n)
	l.startCount(ctx, s)
	return c, s, err
}

func (l *Lock) remember(n *corev1.Node) (claim.Claim, claim.State, error) {
	o := ownClaim{uid: n.UID, rv: n.ResourceVersion, labels: n.Labels, annotations: n.Annotations,
		unschedulable: n.Spec.Unschedulable, schedRV: n.ResourceVersion, at: l.o.Now()}
	var err error
	if lv, ann := n.Labels[claim.Label], n.Annotations[claim.Annotation]; lv != "" || ann != "" {
		o.claim, err = claim.Parse(lv, ann)
		o.state = claim.State(lv)
		if err != nil {
			err = fmt.Errorf("own claim on %s: %w", l.o.Node, err)
		}
	}
	o.err = err
	l.mu.Lock()
	l.own = o
	l.mu.Unlock()
	return o.claim, o.state, err
}

// Observe takes a Node this daemon has just written or read by another
// way (the answer to its cordon or uncordon, or to the kured-compatible
// marks it sets: daemon/drain, daemon/marks; the wait for Ready after the
// boot: kube.ReadyWatch) as the base of its next conditional write. The
// answer is the Node as the API server stored it, as current as a GET (a
// watch's event may be a little older: at worst the write meets the
// conflict), so the claim write that follows does not meet the conflict,
// re-read and retry it would otherwise cost. A Node recreated since is
// left for the next write to find.
func (l *Lock) Observe(n *corev1.Node) {
	if n == nil || n.Name != l.o.Node {
		return
	}
	if cur := l.current(); cur.uid != "" && n.UID != cur.uid {
		return
	}
	// A claim someone broke is remembered as is, as Own does; the next
	// write reports it.
	_, _, _ = l.remember(n)
}

// rebaseOnWatch takes the own Node as the live watch has it
// (Options.OwnWatched) as the base of the next conditional write, when
// the watch is live and the Node is the one last read: its version,
// labels and annotations. The cordon (spec) is not in the watch's
// metadata: the one last read is kept, and the next write's answer, a
// whole Node, brings it up to date. It reports whether it did.
func (l *Lock) rebaseOnWatch() bool {
	if l.o.OwnWatched == nil {
		return false
	}
	m, ok := l.o.OwnWatched()
	cur := l.current()
	if !ok || m.GetUID() != cur.uid || cur.uid == "" {
		return false
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		Labels: maps.Clone(m.GetLabels()), Annotations: maps.Clone(m.GetAnnotations()),
	}}
	n.Spec.Unschedulable = cur.unschedulable
	_, _, _ = l.remember(n)
	l.mu.Lock()
	l.own.schedRV = cur.schedRV // the spec is as last read whole
	l.mu.Unlock()
	return true
}

// Known returns the claim as this daemon last read or wrote it, without a
// request.
func (l *Lock) Known() (claim.Claim, claim.State) {
	cur := l.current()
	return cur.claim, cur.state
}

// Unreadable says why the own claim, as last read or written, cannot be
// read (claim.ErrUnparsable); nil when it can, or when there is none.
func (l *Lock) Unreadable() error { return l.current().err }

// Annotation is an annotation of the own Node as last read or written
// ("" when absent), without a request.
func (l *Lock) Annotation(key string) string { return l.current().annotations[key] }

func (l *Lock) current() ownClaim {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.own
}

// errConflict: the Node changed since this daemon read it.
var errConflict = errors.New("node changed since it was read")

// write replaces the node's claim (state "" removes it), on condition that
// the Node is still at the resourceVersion this daemon last saw. The label
// and the annotation change together. An error other than errConflict
// leaves the outcome unknown: callers re-read with Own.
func (l *Lock) write(ctx context.Context, state claim.State, c claim.Claim) (claim.Claim, error) {
	return l.writeClaim(ctx, state, c, keepSchedule, queue.RoleOf(l.current().labels), marks.Change{})
}

// scheduling is what a claim write does to the node's cordon.
type scheduling int8

const (
	keepSchedule scheduling = iota
	cordonNode              // spec.unschedulable and claim.CordonAnnotation set
	uncordonNode            // both removed
)

// writeClaim is write, cordoning or uncordoning the node in the same
// patch, with the front label role (none for RoleBehind). A claim that
// announces from the front keeps its label until it is released: the
// watchers of the front then see it go from waiting to entering in one
// event of one watch, where its leaving the front's watch before it came
// into the active claims' left a moment in which it was in neither, and a
// node behind it announced in that moment (TestPauseAndHold). Every write
// takes the stopped label off: the daemon runs.
func (l *Lock) writeClaim(ctx context.Context, state claim.State, c claim.Claim, sched scheduling, role queue.Role, with marks.Change) (claim.Claim, error) {
	cur := l.current()
	if state != "" && cur.err != nil {
		// Built on a claim this daemon cannot read (an admin's edit): what
		// it would write is a guess. Only a removal is safe.
		return claim.Claim{}, fmt.Errorf("%w: %v", ErrLost, cur.err)
	}
	var label, ann, digest, since, front any // nil removes
	if state != "" {
		c.State = state
		// The API server's clock, as this host estimates it: the readers
		// judge a claim's age by it, each with its own estimate, so a
		// host clock that is off does not make a claim look older or
		// younger than it is.
		c.Updated = l.o.ServerNow().UTC().Truncate(time.Millisecond)
		s, err := c.Marshal()
		if err != nil {
			return claim.Claim{}, err
		}
		label, ann = string(state), s
		if state == claim.Waiting {
			digest, since = claim.LimitsDigest(c.Limits), claim.SinceValue(c.Since)
		}
		if role != queue.RoleBehind {
			front = string(role)
		}
	}
	labels := map[string]any{}
	for k, v := range with.Labels {
		labels[k] = v
	}
	annotations := map[string]any{}
	for k, v := range with.Annotations {
		annotations[k] = v
	}
	maps.Copy(labels, map[string]any{claim.Label: label, claim.LimitsLabel: digest, claim.SinceLabel: since,
		queue.FrontLabel: front, queue.StoppedLabel: nil})
	annotations[claim.Annotation] = ann
	patch := map[string]any{"metadata": map[string]any{
		"resourceVersion": cur.rv, "labels": labels, "annotations": annotations,
	}}
	if sched != keepSchedule {
		claim.SetCordon(patch, sched == cordonNode)
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return claim.Claim{}, err
	}
	n, err := l.o.Client.CoreV1().Nodes().Patch(ctx, l.o.Node, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "kured-host"})
	switch {
	case apierrors.IsConflict(err):
		return claim.Claim{}, errConflict
	case err != nil:
		return claim.Claim{}, fmt.Errorf("write claim %s on %s: %w", stateName(state), l.o.Node, err)
	}
	if n.UID != cur.uid && cur.uid != "" {
		return claim.Claim{}, fmt.Errorf("%w: node %s was recreated", ErrLost, l.o.Node)
	}
	l.mu.Lock()
	l.failures = 0
	l.mu.Unlock()
	got, _, err := l.remember(n)
	return got, err
}

func stateName(s claim.State) string {
	if s == "" {
		return "removal"
	}
	return string(s)
}

// reread handles a failed write: a conflict or an unknown outcome means
// reading the claim again and deciding from what is really there.
func (l *Lock) reread(ctx context.Context, werr error) error {
	if errors.Is(werr, ErrLost) {
		return werr
	}
	if !errors.Is(werr, errConflict) {
		l.mu.Lock()
		l.failures++
		wait := min(200*time.Millisecond<<min(l.failures-1, 8), 30*time.Second)
		l.mu.Unlock()
		l.log.Warn("claim write failed; reading the claim again", "err", werr, "retry_in", wait)
		if err := sleep(ctx, l.jitter(wait)); err != nil {
			return err
		}
	}
	_, _, err := l.Own(ctx)
	if err != nil && !errors.Is(err, claim.ErrUnparsable) {
		return err
	}
	return nil
}

func mustMarshal(c claim.Claim) string {
	s, err := c.Marshal()
	if err != nil {
		return ""
	}
	return s
}

// Update changes the holder's claim (phase, boot ID, ...) with a
// conditional write; it fails with ErrLost if the claim is no longer this
// node's holding claim.
func (l *Lock) Update(ctx context.Context, change func(*claim.Claim)) (claim.Claim, error) {
	for {
		cur := l.current()
		if cur.state != claim.Holding {
			return claim.Claim{}, fmt.Errorf("update claim: it is %q: %w", stateName(cur.state), ErrLost)
		}
		c := cur.claim
		change(&c)
		got, err := l.write(ctx, claim.Holding, c)
		if err == nil {
			return got, nil
		}
		if err := l.reread(ctx, err); err != nil {
			return claim.Claim{}, err
		}
	}
}

// Cordon is for a slot an earlier version took, whose commit did not
// cordon (phase acquired; this version's commit does: Take). It records
// the cordon in the holder's claim (in phase, cordoned or draining) and
// cordons the node in the same conditional write, unless
// the Node it is conditional on is unschedulable already (an admin's
// cordon, which stays after the reboot): the claim records which. One
// write, so no restart can come between the record and the cordon, and
// its success confirms the claim as a consistent GET before it would; the
// marks with it go in the same write. It reports whether the node was
// unschedulable already, or ErrLost, or ErrRefused if that version of
// the Node is held (Options.Held): no cordon is made.
func (l *Lock) Cordon(ctx context.Context, phase claim.Phase, with marks.Change) (was bool, err error) {
	for {
		cur := l.current()
		if cur.state != claim.Holding {
			return false, fmt.Errorf("record the cordon: the claim is %q: %w", stateName(cur.state), ErrLost)
		}
		if cur.claim.Phase == phase {
			// A write whose reply was lost, read again: it landed, and
			// the Node is unschedulable by its cordon now.
			return cur.claim.WasUnschedulable, nil
		}
		if l.o.Held != nil {
			// The write is conditional on this version: a hold on it
			// is obeyed, one set since makes the write fail.
			own := &metav1.ObjectMeta{Name: l.o.Node, Labels: cur.labels, Annotations: cur.annotations}
			if err := l.o.Held(own); err != nil {
				return false, Refusal{err}
			}
		}
		c, was := cur.claim, cur.unschedulable
		c.Phase, c.WasUnschedulable, c.Cordoned = phase, was, !was
		sched := cordonNode
		if was {
			sched = keepSchedule
		}
		_, err := l.writeClaim(ctx, claim.Holding, c, sched, queue.RoleOf(cur.labels), with)
		if err == nil {
			return was, nil
		}
		if err := l.reread(ctx, err); err != nil {
			return false, err
		}
	}
}

// Confirm checks with a consistent GET that the node still holds its slot
// (same Node object, claim holding) before a disruptive step.
func (l *Lock) Confirm(ctx context.Context) (claim.Claim, error) {
	before := l.current()
	c, state, err := l.Own(ctx)
	if err != nil {
		return claim.Claim{}, err
	}
	after := l.current()
	if state != claim.Holding || (before.uid != "" && after.uid != before.uid) {
		return claim.Claim{}, fmt.Errorf("confirm slot: the claim is %q: %w", stateName(state), ErrLost)
	}
	return c, nil
}

// Release removes the claim (label and annotation together), from any
// state it can read, or an unreadable waiting or entering one: after the
// reboot, or to leave the queue. A claim that changes under it into an
// unreadable one that says it holds is not removed (ErrUnreadable).
func (l *Lock) Release(ctx context.Context) error {
	return l.release(ctx, keepSchedule, marks.Change{})
}

// ReleaseUncordoned is Release that uncordons the node in the same
// write: the end of a cycle in which kured-host cordoned it, with no
// release delay. One write, so the slot is never free while the node is
// still cordoned by its cycle, nor the node uncordoned with the slot still
// held. A claim gone when it is read again after a failed write was
// either this write, which landed (the node is uncordoned too), or an
// admin's removal (nothing uncordoned: the cordon's annotation is still on
// the Node as read, and the cycle undoes the cordon; the marks with it
// were not written either).
func (l *Lock) ReleaseUncordoned(ctx context.Context, with marks.Change) error {
	return l.release(ctx, uncordonNode, with)
}

func (l *Lock) release(ctx context.Context, sched scheduling, with marks.Change) error {
	for {
		cur := l.current()
		if cur.state == "" {
			return nil
		}
		if cur.err != nil && cur.state != claim.Waiting && cur.state != claim.Entering {
			// Changed under this daemon into a claim it cannot read that
			// says it holds (an admin's edit between a read and this
			// removal): never removed by the daemon; the cycle leaves it
			// alone until an admin fixes it.
			return fmt.Errorf("%w: %v", ErrUnreadable, cur.err)
		}
		_, err := l.writeClaim(ctx, "", claim.Claim{}, sched, queue.RoleBehind, with)
		if err == nil {
			l.stopWatch()
			l.log.Info("released the claim", "was", string(cur.state))
			l.setStatus(Status{Position: -1})
			return nil
		}
		if err := l.reread(ctx, err); err != nil {
			return err
		}
	}
}

// ReleaseAfter keeps the slot for the release delay, then releases. The
// end of the delay is written into the claim first, so that a restarted
// daemon waits only what is left rather than starting over or cutting it
// short.
func (l *Lock) ReleaseAfter(ctx context.Context, delay time.Duration) error {
	c, state := l.Known()
	if state == claim.Holding && delay > 0 {
		if c.ReleaseAt == nil {
			end := l.o.Now().Add(delay).UTC().Truncate(time.Millisecond)
			var err error
			c, err = l.Update(ctx, func(c *claim.Claim) { c.Phase, c.ReleaseAt = claim.PhaseReleasing, &end })
			if err != nil {
				return err
			}
		}
		if wait := c.ReleaseAt.Sub(l.o.Now()); wait > 0 {
			l.log.Info("holding the slot for the release delay", "left", wait.Round(time.Second))
			if err := sleep(ctx, wait); err != nil {
				return err
			}
		}
	}
	return l.Release(ctx)
}
