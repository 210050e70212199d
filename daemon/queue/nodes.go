package queue

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
)

// Participants turns Nodes into the rules' view of them, as another node's
// lock sees them: one Participant for each Node with a claim label or
// annotation (what cannot be read is kept, with Err set), each judged by
// claim.Plausible against serverNow (the API server's clock) and
// tolerance (the stated clock tolerance), a waiting claim marked stopped
// taken as NotReady; Nodes without a claim are left out.
func Participants(nodes []*corev1.Node, serverNow time.Time, tolerance time.Duration) []claim.Participant {
	return new(Reader).Participants(nodes, serverNow, tolerance)
}

// Reader reads the claims on Nodes and keeps each claim's parse for the
// next read: a node of the front decides again on every change it sees,
// and parsing every claim every time was most of its CPU; the simulator's
// checkers read the whole queue again and again. The Participants share
// their claims' maps and slices between reads: read them only.
type Reader struct {
	mu     sync.Mutex
	parsed map[string]parsedClaim // node name -> its last parse
}

// Participants is Participants, with the parses of the last read kept.
func (r *Reader) Participants(nodes []*corev1.Node, serverNow time.Time, tolerance time.Duration) []claim.Participant {
	ps := r.Parse(nodes)
	for i, p := range ps {
		if Stopped(p) {
			p.Ready = false // as the lock reads it: before Plausible
		}
		ps[i] = claim.Plausible(p, serverNow, tolerance)
	}
	return ps
}

// parsedClaim is a node's claim as last parsed, with the label and
// annotation it was parsed from.
type parsedClaim struct {
	label, annotation string
	claim             claim.Claim
	err               error
}

// Parse is one Participant for each Node with a claim label or annotation
// (what cannot be read is kept, with Err set), Ready as its Node says,
// each parsed again only if its claim changed since the last read.
func (r *Reader) Parse(nodes []*corev1.Node) []claim.Participant {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Rebuilt from the nodes each time, so that a node gone from the
	// queue is forgotten.
	next := make(map[string]parsedClaim, len(nodes))
	ps := make([]claim.Participant, 0, len(nodes))
	for _, n := range nodes {
		lv, ann := n.Labels[claim.Label], n.Annotations[claim.Annotation]
		if lv == "" && ann == "" {
			continue
		}
		p, ok := r.parsed[n.Name]
		if !ok || p.label != lv || p.annotation != ann {
			p = parsedClaim{label: lv, annotation: ann}
			p.claim, p.err = claim.Parse(lv, ann)
		}
		next[n.Name] = p
		ps = append(ps, claim.Participant{Name: n.Name, Labels: n.Labels, Ready: NodeReady(n), Claim: p.claim, Err: p.err})
	}
	r.parsed = next
	return ps
}

// ReadyStatus is n's Ready condition's status ("" when it has none).
func ReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// NodeReady reports whether n's Ready condition is true.
func NodeReady(n *corev1.Node) bool { return ReadyStatus(n) == corev1.ConditionTrue }
