package queue

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
)

// claimNode is a Node with c's claim (the label and annotation as given
// when label or ann is set), Ready as ready says ("" for no condition).
func claimNode(t *testing.T, name string, c claim.Claim, ready corev1.ConditionStatus, labels ...string) *corev1.Node {
	t.Helper()
	ann, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{claim.Label: string(c.State)},
		Annotations: map[string]string{claim.Annotation: ann}}}
	for i := 0; i+1 < len(labels); i += 2 {
		n.Labels[labels[i]] = labels[i+1]
	}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

// TestParticipants: the Nodes as the rules read them. A Node with no
// claim is left out; a broken claim is kept, with its error; readiness
// is the Ready condition's (none is not Ready); a waiting claim its
// daemon marked stopped reads as NotReady; an active claim acquired an
// hour ahead of the API server is distrusted (claim.Plausible).
func TestParticipants(t *testing.T) {
	server := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	waiting := claim.Claim{V: 1, State: claim.Waiting, Since: server.Add(-time.Minute), Updated: server.Add(-time.Minute), Limits: claim.Limits{Concurrency: 1}}
	ahead := server.Add(time.Hour)
	forged := claim.Claim{V: 1, State: claim.Holding, Since: server, Updated: server, Acquired: &ahead, Limits: claim.Limits{Concurrency: 1}}
	tests := []struct {
		name      string
		node      *corev1.Node
		want      bool // a participant
		wantReady bool
		wantErr   bool
	}{
		{"no claim", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}}}, false, false, false},
		{"waiting, Ready", claimNode(t, "n", waiting, corev1.ConditionTrue), true, true, false},
		{"waiting, NotReady", claimNode(t, "n", waiting, corev1.ConditionFalse), true, false, false},
		{"waiting, no Ready condition", claimNode(t, "n", waiting, ""), true, false, false},
		{"waiting, its daemon stopped", claimNode(t, "n", waiting, corev1.ConditionTrue, StoppedLabel, "true"), true, false, false},
		{"the label alone edited", func() *corev1.Node {
			n := claimNode(t, "n", waiting, corev1.ConditionTrue)
			n.Labels[claim.Label] = string(claim.Entering)
			return n
		}(), true, true, true},
		{"an annotation that is not JSON", func() *corev1.Node {
			n := claimNode(t, "n", waiting, corev1.ConditionTrue)
			n.Annotations[claim.Annotation] = "{"
			return n
		}(), true, true, true},
		{"the annotation alone, no label", func() *corev1.Node {
			n := claimNode(t, "n", waiting, corev1.ConditionTrue)
			delete(n.Labels, claim.Label)
			return n
		}(), true, true, true},
		{"holding, acquired an hour ahead of the server", claimNode(t, "n", forged, corev1.ConditionTrue), true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := Participants([]*corev1.Node{tt.node}, server, 0)
			if got := len(ps) == 1; got != tt.want {
				t.Fatalf("participants %v, want one: %v", ps, tt.want)
			}
			if !tt.want {
				return
			}
			p := ps[0]
			if p.Name != "n" || p.Ready != tt.wantReady || (p.Err != nil) != tt.wantErr {
				t.Errorf("got %s, Ready %v, Err %v; want Ready %v, an error %v", p.Name, p.Ready, p.Err, tt.wantReady, tt.wantErr)
			}
		})
	}
}

// TestReaderReparses: the Reader keeps each claim's parse between reads,
// and parses again a claim whose label or annotation changed, whichever
// of the two; a node gone from a read is forgotten.
func TestReaderReparses(t *testing.T) {
	since := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	c := claim.Claim{V: 1, State: claim.Waiting, Since: since, Updated: since, Limits: claim.Limits{Concurrency: 2}}
	var r Reader
	read := func(n *corev1.Node) claim.Participant {
		t.Helper()
		ps := r.Parse([]*corev1.Node{n})
		if len(ps) != 1 {
			t.Fatalf("read %d participants, want 1", len(ps))
		}
		return ps[0]
	}
	n := claimNode(t, "n", c, corev1.ConditionTrue)
	if p := read(n); p.Err != nil || p.Claim.State != claim.Waiting || p.Claim.Limits.Concurrency != 2 {
		t.Fatalf("first read: %+v", p)
	}

	// The label alone: the same annotation, another state.
	n.Labels[claim.Label] = string(claim.Holding)
	if p := read(n); p.Err == nil {
		t.Errorf("the label edited alone to holding read as %s with no error", p.Claim.State)
	}

	// The annotation alone: the label back, the limits rewritten.
	n.Labels[claim.Label] = string(claim.Waiting)
	c.Limits.Concurrency = 3
	ann, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[claim.Annotation] = ann
	if p := read(n); p.Err != nil || p.Claim.Limits.Concurrency != 3 {
		t.Errorf("after the annotation changed: concurrency %d, err %v; want 3, none", p.Claim.Limits.Concurrency, p.Err)
	}

	// Gone from a read: forgotten.
	if ps := r.Parse(nil); len(ps) != 0 {
		t.Fatalf("an empty read gave %v", ps)
	}
	if _, kept := r.parsed["n"]; kept {
		t.Error("a node gone from the read is still remembered")
	}
}
