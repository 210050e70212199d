package lock

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// withOwn puts this node's claim as it knows it (cur; none without one)
// in place of what a read showed of it.
func (l *Lock) withOwn(ps []claim.Participant, cur ownClaim) []claim.Participant {
	ps = slices.DeleteFunc(ps, func(p claim.Participant) bool { return p.Name == l.o.Node })
	if cur.state != "" {
		ps = append(ps, cur.participant(l.o.Node))
	}
	return ps
}

// besides is the nodes of more not in read: a waiting claim of the front
// that publishes other limits is selected twice.
func besides(read, more []*corev1.Node) []*corev1.Node {
	return slices.DeleteFunc(slices.Clone(more), func(n *corev1.Node) bool {
		return slices.ContainsFunc(read, func(r *corev1.Node) bool { return r.Name == n.Name })
	})
}

// activeSelector selects the nodes whose claim takes a slot: every claim
// label but waiting (an unknown value counts as holding).
var activeSelector = claim.Label + "," + claim.Label + "!=" + string(claim.Waiting)

// frontSelector selects the nodes that carry the front label: the
// waiting nodes of every class's front, and the active ones that came
// through it (a node keeps its label through its slot).
var frontSelector = queue.FrontLabel

// The watch and the Lists divide the active claims between them so that
// each is received once. The watch of the front has the active nodes that
// came through it, each change of theirs in one event; the watch of the
// active claims has only the others (an earlier version's, an admin's).
// A List of the front has only its waiting nodes: the List of the active
// claims, the safety argument's read, has every active claim.
var (
	activeBesideFrontSelector = activeSelector + ",!" + queue.FrontLabel
	frontWaitingSelector      = queue.FrontLabel + "," + claim.Label + "=" + string(claim.Waiting)
)

// listBinding lists the claims that bind a node publishing limits own:
// the active ones, and the waiting ones that publish other limits; with
// front, the front too. One List, then the others at its resourceVersion
// exactly, so that together they are one snapshot: consistent, or from
// the API server's cache. It returns that resourceVersion.
func (l *Lock) listBinding(ctx context.Context, own claim.Limits, consistent, front bool) ([]*corev1.Node, string, error) {
	rv := "0"
	if consistent {
		rv = ""
	}
	nodes, at, err := l.listNodes(ctx, activeSelector, rv, "")
	if err != nil {
		return nil, "", err
	}
	more := []string{otherLimitsSelector(own)}
	if front {
		more = append(more, frontWaitingSelector)
	}
	for _, sel := range more {
		read, _, err := l.listNodes(ctx, sel, at, metav1.ResourceVersionMatchExact)
		if err != nil {
			return nil, "", err
		}
		nodes = append(nodes, besides(nodes, read)...)
	}
	return nodes, at, nil
}

// waitingOf is the nodes of nodes whose claim label says waiting, as
// frontWaitingSelector selects them.
func waitingOf(nodes []*corev1.Node) []*corev1.Node {
	return slices.DeleteFunc(nodes, func(n *corev1.Node) bool {
		return n.Labels[claim.Label] != string(claim.Waiting)
	})
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
// then taken as Ready unless read otherwise (queue.Front's Readiness and Probe,
// the watch of a predecessor): an entering node that verifies may give
// way to a NotReady one, which is always safe.
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
