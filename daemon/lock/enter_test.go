package lock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/marks"
)

// TestHoldAtCommit: an entering node whose own Node, as the verify reads
// it, carries the operator's hold label steps back to waiting, in its
// place, and Acquire says it was refused; without the label it commits.
func TestHoldAtCommit(t *testing.T) {
	server := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	own := claim.Limits{Concurrency: 1}
	for _, tc := range []struct {
		name string
		hold map[string]string // labels an operator set
		want claim.State
	}{
		{"not held", nil, claim.Holding},
		{"held", map[string]string{"example.com/hold": "change 42"}, claim.Waiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine := claimedNode(t, "me", "zone-a", claim.Claim{State: claim.Entering, Since: server.Add(-time.Minute),
				Updated: server, Limits: own, Groups: map[string]string{}})
			maps.Copy(mine.Labels, tc.hold)
			l := New(Options{
				Client: fake.NewClientset(mine), Node: "me", Limits: own,
				Now: func() time.Time { return server }, BootID: func() (string, error) { return "boot-1", nil },
				Held: func(n metav1.Object) error {
					if v, ok := n.GetLabels()["example.com/hold"]; ok {
						return errors.New("held: " + v)
					}
					return nil
				},
			})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			_, err := l.Acquire(ctx, Take{})
			if held := tc.want == claim.Waiting; held != errors.Is(err, ErrRefused) || (!held && err != nil) {
				t.Fatalf("Acquire: %v, want refused: %v", err, held)
			}
			c, st := l.Known()
			if st != tc.want {
				t.Fatalf("claim %q after Acquire, want %q", st, tc.want)
			}
			if !c.Since.Equal(server.Add(-time.Minute)) {
				t.Errorf("the claim's place moved: since %s", c.Since)
			}
			if st == claim.Waiting && !strings.Contains(l.Status().Reason, "held: change 42") {
				t.Errorf("status reason %q does not say why", l.Status().Reason)
			}
		})
	}
}

// TestCommitCordons: the commit takes the slot and cordons the node in one
// write, recording the phase and carrying the marks it is given; a node
// unschedulable already is left so, and recorded as such (its cordon is
// not ours to undo). Whether it is unschedulable is known only of the
// version last read whole: a verify that finds the Node at another (a
// watch of its metadata moved the base on) reads it and verifies again
// before it commits. A no from the last look (Take.Check) steps the claim
// back, in its place.
func TestCommitCordons(t *testing.T) {
	server := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	own := claim.Limits{Concurrency: 1}
	for _, tc := range []struct {
		name          string
		unschedulable bool // as read whole
		moved         bool // cordoned since, seen by the watch of metadata
		take          Take
		paused        bool
		wantState     claim.State
		wantPhase     claim.Phase
		gets          int // made by Acquire
	}{
		{"cordons", false, false, Take{}, false, claim.Holding, claim.PhaseCordoned, 0},
		{"draining at once, with the marks", false, false,
			Take{Phase: claim.PhaseDraining, With: marks.Change{Labels: map[string]string{"example.com/rebooting": "true"}}}, false, claim.Holding, claim.PhaseDraining, 0},
		{"unschedulable already", true, false, Take{}, false, claim.Holding, claim.PhaseCordoned, 0},
		{"cordoned by an admin since read whole", false, true, Take{}, false, claim.Holding, claim.PhaseCordoned, 1},
		{"paused at the last look", false, false, Take{Check: func(context.Context) error { return errors.New("paused") }}, true, claim.Waiting, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine := claimedNode(t, "me", "zone-a", claim.Claim{State: claim.Entering, Since: server.Add(-time.Minute),
				Updated: server, Limits: own, Groups: map[string]string{}})
			mine.UID, mine.ResourceVersion, mine.Spec.Unschedulable = "uid-1", "10", tc.unschedulable
			client := fake.NewClientset(mine.DeepCopy())
			gets := 0
			client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets++
				return false, nil, nil
			})
			var watched metav1.Object
			l := New(Options{
				Client: client, Node: "me", Limits: own,
				Now: func() time.Time { return server }, BootID: func() (string, error) { return "boot-1", nil },
				OwnWatched: func() (metav1.Object, bool) { return watched, watched != nil },
			})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.moved {
				// An admin cordoned the Node, and the watch of its
				// metadata shows the new version: the base moves on, its
				// spec as last read whole (schedulable).
				n, err := client.CoreV1().Nodes().Get(ctx, "me", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				n.ResourceVersion, n.Spec.Unschedulable = "11", true
				if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				watched = &n.ObjectMeta
				if !l.rebaseOnWatch() {
					t.Fatal("not rebased on the watch")
				}
			}
			gets = 0
			_, err := l.Acquire(ctx, tc.take)
			acquireGets := gets
			if tc.paused != errors.Is(err, ErrRefused) || (!tc.paused && err != nil) {
				t.Fatalf("Acquire: %v, want refused: %v", err, tc.paused)
			}
			c, st := l.Known()
			if st != tc.wantState || c.Phase != tc.wantPhase {
				t.Fatalf("claim %q in phase %q after Acquire, want %q in %q", st, c.Phase, tc.wantState, tc.wantPhase)
			}
			if !c.Since.Equal(server.Add(-time.Minute)) {
				t.Errorf("the claim's place moved: since %s", c.Since)
			}
			n, err := client.CoreV1().Nodes().Get(ctx, "me", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if acquireGets != tc.gets {
				t.Errorf("Acquire made %d GETs of its Node, want %d", acquireGets, tc.gets)
			}
			if st != claim.Holding {
				if n.Spec.Unschedulable {
					t.Error("cordoned without the slot")
				}
				return
			}
			was := tc.unschedulable || tc.moved
			if !n.Spec.Unschedulable || c.WasUnschedulable != was || c.Cordoned == was {
				t.Errorf("unschedulable %v, claim: was unschedulable %v, cordoned %v; want unschedulable, was %v",
					n.Spec.Unschedulable, c.WasUnschedulable, c.Cordoned, was)
			}
			if _, ours := n.Annotations[claim.CordonAnnotation]; ours == was {
				t.Errorf("the cordon annotation: %v, want %v", ours, !was)
			}
			for k, v := range tc.take.With.Labels {
				if n.Labels[k] != v {
					t.Errorf("mark %s=%q, want %v", k, n.Labels[k], v)
				}
			}
		})
	}
}

// TestHoldAtCordon: a holder whose own Node, as the cordon's write would
// be conditional on it, carries the hold label makes no cordon and says
// it was refused; without the label the same write cordons.
func TestHoldAtCordon(t *testing.T) {
	server := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprint("held ", held), func(t *testing.T) {
			mine := claimedNode(t, "me", "zone-a", claim.Claim{State: claim.Holding, Since: server.Add(-time.Minute),
				Updated: server, Acquired: &server, BootID: "boot-1", Phase: claim.PhaseAcquired, Limits: claim.Limits{Concurrency: 1}})
			if held {
				mine.Labels["example.com/hold"] = "true"
			}
			client := fake.NewClientset(mine)
			l := New(Options{
				Client: client, Node: "me", Limits: claim.Limits{Concurrency: 1}, Now: func() time.Time { return server },
				Held: func(n metav1.Object) error {
					if _, ok := n.GetLabels()["example.com/hold"]; ok {
						return errors.New("held")
					}
					return nil
				},
			})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			_, err := l.Cordon(ctx, claim.PhaseCordoned, marks.Change{})
			if held != errors.Is(err, ErrRefused) || (!held && err != nil) {
				t.Fatalf("Cordon: %v, want refused: %v", err, held)
			}
			n, err := client.CoreV1().Nodes().Get(ctx, "me", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Spec.Unschedulable == held {
				t.Errorf("unschedulable %v with the node held %v", n.Spec.Unschedulable, held)
			}
		})
	}
}
