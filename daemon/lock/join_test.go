package lock

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/marks"
)

// TestJoinBase: a join long after the last read of the own Node writes
// on the version the live watch has, without reading it again, and
// records the zone the watch shows; with no live watch of the same Node
// it reads the Node first.
func TestJoinBase(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "me", UID: "uid-1", ResourceVersion: "10",
		Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a"},
	}}
	moved := node.DeepCopy() // as the watch has it since: the kubelet's writes, a new zone
	moved.ResourceVersion, moved.Labels["topology.kubernetes.io/zone"] = "42", "zone-b"
	watching := func(n *corev1.Node, live bool) func() (metav1.Object, bool) {
		return func() (metav1.Object, bool) { return n.DeepCopy(), live }
	}
	recreated := moved.DeepCopy()
	recreated.UID = "uid-2"
	tests := []struct {
		name    string
		watched func() (metav1.Object, bool)
		reads   int64
		rv      string // the version the join is conditional on
		zone    string // the group the claim records
	}{
		{"no watch", nil, 1, "42", "zone-b"},
		{"the watch is not live", watching(moved, false), 1, "42", "zone-b"},
		{"the live watch has the Node", watching(moved, true), 0, "42", "zone-b"},
		{"the Node recreated since the last read", watching(recreated, true), 1, "42", "zone-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(node.DeepCopy())
			var now atomic.Int64
			now.Store(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC).UnixNano())
			l := New(Options{
				Client: client, Node: "me", OwnWatched: tt.watched, Rand: rand.New(rand.NewPCG(1, 2)),
				Limits: claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: "topology.kubernetes.io/zone", Max: 1}}},
				Now:    func() time.Time { return time.Unix(0, now.Load()) },
			})
			ctx := context.Background()
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			// Hours later the Node is at the watch's version.
			if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), moved.DeepCopy(), ""); err != nil {
				t.Fatal(err)
			}
			now.Add(int64(3 * time.Hour))
			var gets atomic.Int64
			var rv string
			client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets.Add(1)
				return false, nil, nil
			})
			client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				var p struct {
					Metadata struct {
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil {
					t.Error(err)
				}
				rv = p.Metadata.ResourceVersion
				return false, nil, nil
			})
			l.nodes = 1 // no count to read: the pace is not under test
			if err := l.Join(ctx, marks.Change{}); err != nil {
				t.Fatal(err)
			}
			c, st := l.Known()
			if st != claim.Waiting {
				t.Fatalf("state %q after the join, want waiting", st)
			}
			if got := gets.Load(); got != tt.reads {
				t.Errorf("%d reads of the own Node, want %d", got, tt.reads)
			}
			if rv != tt.rv {
				t.Errorf("the join is conditional on version %q, want %q", rv, tt.rv)
			}
			if got := c.Groups["topology.kubernetes.io/zone"]; got != tt.zone {
				t.Errorf("the claim records zone %q, want %q", got, tt.zone)
			}
		})
	}
}
