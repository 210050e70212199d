package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/queue"
)

// Join puts the node in the queue (waiting). The queue order comes from the
// API server's clock: the moment of the write. The write is paced
// (paceJoin), so that a kernel update that every node learns of in the
// same minute does not bring every node's write in the same second. The
// place is the write's, not the moment Join was called: a node that took
// an earlier moment would join ahead of nodes that had read the queue,
// which then think themselves nearer the front than they are (in a
// 500-node roll, 940 MB of reads of the whole queue against 616 MB). The
// marks with it go in the same write.
func (l *Lock) Join(ctx context.Context, with marks.Change) error {
	if l.current().state != "" {
		return nil
	}
	if err := l.paceJoin(ctx); err != nil {
		return err
	}
	for {
		cur := l.current()
		if cur.state != "" {
			return nil
		}
		if l.o.Now().Sub(cur.at) > joinReadAfter {
			// The write is conditional on the Node's version, and a need
			// comes long after the daemon last read its Node (hours, as a
			// rule), while the kubelet and the controllers change it
			// (status reports, taints). On the old version the write would
			// be refused and cost a read and a second write; the zone
			// labels the claim records are read fresh too. The live
			// watch of the Node has them without a request; a watch a
			// moment late costs that read and write, no more.
			if l.rebaseOnWatch() {
				continue
			}
			if _, _, err := l.Own(ctx); err != nil && !errors.Is(err, claim.ErrUnparsable) {
				return err
			}
			continue
		}
		own := l.ownLimits()
		c := claim.Claim{Since: l.o.ServerNow().UTC().Truncate(time.Millisecond), Limits: own, Groups: groupValues(cur.labels, own.Groups)}
		_, err := l.writeClaim(ctx, claim.Waiting, c, keepSchedule, queue.RoleOf(cur.labels), with)
		if err == nil {
			l.log.Info("joined the queue for a reboot slot")
			return nil
		}
		if err := l.reread(ctx, err); err != nil {
			return err
		}
	}
}

// joinReadAfter: a join writes on a version of the Node read or written
// at most this long ago; an older one is read again first.
const joinReadAfter = time.Second

// paceJoin waits a random time up to the cluster's node count /
// queue.JoinRate (queue.JoinDelay).
// The count is the one keepCount read last, or read now (one small
// consistent read) if there is none; if that fails, the node joins now.
func (l *Lock) paceJoin(ctx context.Context) error {
	l.mu.Lock()
	n := l.nodes
	l.mu.Unlock()
	if n == 0 {
		if n = l.countNodes(ctx); n == 0 {
			return nil
		}
	}
	l.mu.Lock()
	d := queue.JoinDelay(n, l.o.Rand.Int64N)
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	l.log.Debug("pacing the join", "nodes", n, "in", d)
	return sleep(ctx, d)
}

// countNodes reads the cluster's node count and keeps it for paceJoin; 0
// if the read fails (logged: it only paces).
func (l *Lock) countNodes(ctx context.Context) int {
	n, err := l.clusterSize(ctx)
	if err != nil {
		l.log.Debug("cannot count the cluster's nodes", "err", err)
		return 0
	}
	l.mu.Lock()
	l.nodes = n
	l.mu.Unlock()
	return n
}

// clusterSize counts the cluster's Nodes: a List of one Node's metadata,
// consistent (the API server says how many remain).
func (l *Lock) clusterSize(ctx context.Context) (int, error) {
	opts := metav1.ListOptions{Limit: 1}
	if l.o.Metadata == nil {
		list, err := l.o.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return 0, err
		}
		return len(list.Items) + int(ptr.Deref(list.RemainingItemCount, 0)), nil
	}
	list, err := l.o.Metadata.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, opts)
	if err != nil {
		return 0, err
	}
	return len(list.Items) + int(ptr.Deref(list.RemainingItemCount, 0)), nil
}

// Take is what the commit does besides taking the slot: it cordons the
// node (unless it is unschedulable already) and records Phase
// (claim.PhaseCordoned; PhaseDraining when the drain starts at once) and
// the marks With, all in the one write, so that a node never holds a slot
// while pods may still be scheduled on it, and no restart comes between
// the slot and its cordon. Check, if set, is the last look before that
// first disruptive write (the operator's orders and every blocker),
// asked once a verify has said commit: an error steps the claim back to
// waiting, in its place, and Acquire returns it wrapped in ErrRefused.
type Take struct {
	Phase claim.Phase // "" is claim.PhaseCordoned
	With  marks.Change
	Check func(context.Context) error
}

// Acquire takes a slot and cordons the node (take): from waiting it waits
// until eligible and announces; from entering it verifies, then commits,
// stays entering or steps back (queue.Entrant decides). It returns the
// holding claim, ErrNotJoined if there is no claim, ErrLost if the claim
// disappeared, or ErrRefused.
func (l *Lock) Acquire(ctx context.Context, take Take) (claim.Claim, error) {
	e := queue.NewEntrant(l.o.Node)
	for {
		cur := l.current()
		if cur.err != nil {
			// Never announce or commit on a claim this daemon cannot
			// read (an admin's edit): the cycle decides what to do.
			return claim.Claim{}, fmt.Errorf("%w: %v", ErrLost, cur.err)
		}
		var err error
		switch cur.state {
		case "":
			return claim.Claim{}, ErrNotJoined
		case claim.Holding:
			l.stopWatch()
			l.setStatus(Status{State: claim.Holding, Position: -1})
			return cur.claim, nil
		case claim.Waiting:
			e.Waiting()
			err = l.takeTurn(ctx)
		case claim.Entering:
			err = l.enter(ctx, e, take)
		default:
			err = fmt.Errorf("own claim is in state %q, which this daemon does not write: %w", cur.state, ErrLost)
		}
		if err != nil {
			return claim.Claim{}, err
		}
	}
}

// takeTurn waits until the queue lets this node go, asks MayAnnounce,
// and announces.
func (l *Lock) takeTurn(ctx context.Context) error {
	if err := l.waitEligible(ctx); err != nil {
		return err
	}
	if l.current().state == claim.Waiting && l.o.MayAnnounce != nil {
		if err := l.o.MayAnnounce(ctx); err != nil {
			l.mu.Lock()
			l.status.State, l.status.Reason = claim.Waiting, err.Error()
			l.mu.Unlock()
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
	}
	return l.announce(ctx)
}

// Refusal is Options.Held's or Take.Check's no: before the commit or
// the cordon. It is ErrRefused (errors.Is) and says why.
type Refusal struct{ Err error }

func (r Refusal) Error() string { return r.Err.Error() }

// Is makes a Refusal an ErrRefused.
func (r Refusal) Is(target error) bool { return target == ErrRefused }

func (r Refusal) Unwrap() error { return r.Err }

// enter verifies the entering claim and does what the Entrant decides. A
// commit verdict asks take.Check last: after the verify, so that a look
// that takes its time (a query of the alerts) delays the commit, which
// the entering claim has reserved, not the verify's read of the others.
func (l *Lock) enter(ctx context.Context, e *queue.Entrant, take Take) error {
	v, err := l.verify(ctx)
	if err != nil || v == nil {
		return err
	}
	a, no := e.Verified(*v), v.Held
	if a.Move == queue.EnterCommit && take.Check != nil {
		no = take.Check(ctx)
		a = e.Checked(no)
	}
	switch a.Move {
	case queue.EnterCommit:
		return l.commit(ctx, take)
	case queue.EnterRefuse:
		if err := l.stepBack(ctx, a.Reason); err != nil {
			return err
		}
		return fmt.Errorf("%w: %w", ErrRefused, no)
	case queue.EnterStepBack:
		if err := l.stepBack(ctx, a.Reason); err != nil || a.Wait == 0 {
			return err
		}
		return sleep(ctx, l.jitter(a.Wait))
	case queue.EnterReread:
		if !v.Announced {
			l.log.Warn("own claim changed under this daemon; reading it again")
		}
		_, _, err := l.Own(ctx)
		if err != nil && !errors.Is(err, claim.ErrUnparsable) {
			return err
		}
		return nil
	}
	l.setStatus(Status{State: claim.Entering, Position: -1, Reason: a.Reason})
	return l.waitChange(ctx, l.jitter(a.Wait))
}

// groupValues are the node's values of the labels the rules name.
func groupValues(labels map[string]string, rules []claim.GroupLimit) map[string]string {
	vs := map[string]string{}
	for _, g := range rules {
		if v, ok := labels[g.Label]; ok {
			vs[g.Label] = v
		}
	}
	return vs
}

// announce writes entering, freezing the published limits and the node's
// group label values.
func (l *Lock) announce(ctx context.Context) error {
	for {
		cur := l.current()
		if cur.state != claim.Waiting {
			return nil
		}
		c := cur.claim
		c.Limits = queue.Publish(l.ownLimits(), c.Limits)
		c.Groups = groupValues(cur.labels, c.Limits.Groups)
		// With the front label: a node admitted at its first look in the
		// front has not written it yet, and the verify reads the front
		// from the watch once it holds the announce.
		_, err := l.writeClaim(ctx, claim.Entering, c, keepSchedule, queue.RoleIn, marks.Change{})
		if err == nil {
			l.log.Info("eligible: announcing (entering)")
			return nil
		}
		if err := l.reread(ctx, err); err != nil {
			return err
		}
	}
}

// verify reads a consistent snapshot (a List served from etcd's current
// revision, never a cache) for the Entrant to decide from, with whether
// the claim in it is still the one this daemon announced; nil, with no
// error, when the claim is to be looked at again first.
func (l *Lock) verify(ctx context.Context) (*queue.Verified, error) {
	cur := l.current()
	if want := queue.Publish(l.ownLimits(), cur.claim.Limits); !limitsEqual(want, cur.claim.Limits) {
		// The configuration got stricter since the announce (a restart
		// with a new config): announce the stricter limits before
		// verifying against them; a failed write reads the claim again.
		c := cur.claim
		c.Limits = want
		if _, err := l.write(ctx, claim.Entering, c); err != nil {
			return nil, l.reread(ctx, err)
		}
		cur = l.current()
	}
	// Consistently, the active claims (the safety argument's read) and
	// the waiting ones that publish other limits than this node's (they
	// bind too, and lower a limit only if they differ); and the front's
	// waiting members (their places, for Yield), from the watch when it
	// holds the announce. The watch is read first: it is then at a
	// revision no later than the Lists', and a member of the front that
	// entered in between is in the List of the active claims.
	front, watched := l.frontAfter(ctx, cur)
	nodes, _, err := l.listBinding(ctx, cur.claim.Limits, true, !watched)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	nodes = append(nodes, besides(nodes, waitingOf(front))...)
	self := announced(nodes, l.o.Node, cur)
	v := &queue.Verified{Now: l.o.Now(), Server: l.o.ServerNow(), Announced: self != nil, Own: l.ownLimits(), TTL: l.o.TTL}
	if self == nil {
		return v, nil
	}
	v.Whole = self.ResourceVersion == cur.schedRV
	if l.o.Held != nil {
		v.Held = l.o.Held(self)
	}
	v.Snap = l.distrust(l.front.Readiness(l.bindingClaims.Parse(nodes)))
	v.Silent = l.front.Silent(v.Now)
	l.reportAlarms(ctx, l.front.Alarms(v.Snap, v.Server, true))
	return v, nil
}

// announced is this node's Node in nodes if it carries the entering claim
// this daemon announced (the same Node, label and annotation); nil if not.
func announced(nodes []*corev1.Node, name string, cur ownClaim) *corev1.Node {
	for _, n := range nodes {
		if n.Name == name && n.UID == cur.uid && n.Labels[claim.Label] == string(claim.Entering) &&
			n.Annotations[claim.Annotation] == mustMarshal(cur.claim) {
			return n
		}
	}
	return nil
}

func limitsEqual(a, b claim.Limits) bool {
	return a.Concurrency == b.Concurrency && slices.Equal(a.Groups, b.Groups)
}

// commit writes holding, with the boot ID of this boot, and the cordon
// (take), conditional on the Node being as the verify read it.
func (l *Lock) commit(ctx context.Context, take Take) error {
	cur := l.current()
	boot, err := l.o.BootID()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	c, was := cur.claim, cur.unschedulable
	now := l.o.ServerNow().UTC().Truncate(time.Millisecond)
	c.Acquired, c.BootID, c.Phase = &now, boot, cmp.Or(take.Phase, claim.PhaseCordoned)
	c.WasUnschedulable, c.Cordoned = was, !was
	sched := cordonNode
	if was {
		sched = keepSchedule
	}
	if _, err := l.writeClaim(ctx, claim.Holding, c, sched, queue.RoleOf(cur.labels), take.With); err != nil {
		return l.reread(ctx, err)
	}
	l.log.Info("took a reboot slot (holding)", "cordoned", !was)
	return nil
}

// stepBack returns to waiting, keeping the place in the queue.
func (l *Lock) stepBack(ctx context.Context, reason string) error {
	cur := l.current()
	l.log.Info("stepping back to waiting", "reason", reason)
	if _, err := l.write(ctx, claim.Waiting, cur.claim); err != nil {
		return l.reread(ctx, err)
	}
	l.setStatus(Status{State: claim.Waiting, Position: -1, Reason: reason})
	return nil
}
