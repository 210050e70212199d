package steer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSameOrders: the watch of the orders wakes a waiting node only for
// a change of an order (the ConfigMap's data, the Node's hold), not for
// the node's own claim writes or the kubelet's.
func TestSameOrders(t *testing.T) {
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}, Data: data}
	}
	node := func(labels, annotations map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}}
	}
	paused := map[string]string{KeyPaused: "change freeze"}
	held := map[string]string{HoldLabel: "true"}
	for _, tc := range []struct {
		name string
		a, b any
		same bool
	}{
		{"the ConfigMap written again as it was", cm(paused), cm(map[string]string{KeyPaused: "change freeze"}), true},
		{"the pause lifted", cm(paused), cm(map[string]string{}), false},
		{"the pause set", cm(nil), cm(paused), false},
		{"the settings changed", cm(map[string]string{KeySettings: "[lock]\nconcurrency = 2\n"}), cm(map[string]string{KeySettings: "[lock]\nconcurrency = 3\n"}), false},
		{"the node's own claim written", node(map[string]string{"kured-host.dev/claim": "waiting"}, nil), node(map[string]string{"kured-host.dev/claim": "entering"}, map[string]string{"kured-host.dev/claim": "{}"}), true},
		{"the hold set", node(nil, nil), node(held, nil), false},
		{"the hold lifted", node(held, nil), node(nil, nil), false},
		{"the hold's reason changed", node(held, map[string]string{HoldReason: "disk check"}), node(held, map[string]string{HoldReason: "firmware"}), false},
		{"a held node's claim written", node(held, nil), node(map[string]string{HoldLabel: "true", "kured-host.dev/claim": "waiting"}, nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameOrders(tc.a, tc.b); got != tc.same {
				t.Errorf("sameOrders = %v, want %v", got, tc.same)
			}
		})
	}
}
