package steer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kured-host/kured-host/daemon/block"
)

func TestPauseOf(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		data   map[string]string
		paused bool
		want   string // Order.String
		issue  string // in Problem
	}{
		{"no object", nil, false, "", ""},
		{"no key", map[string]string{"other": "x"}, false, "", ""},
		{"false", map[string]string{KeyPaused: " False "}, false, "", ""},
		{"empty reason is still a pause", map[string]string{KeyPaused: ""}, true, noReasonGiven, ""},
		{"reason only, as kubectl writes it", map[string]string{KeyPaused: "kernel freeze"}, true, "kernel freeze", ""},
		{"everything", map[string]string{KeyPaused: "freeze", KeyPausedBy: "alice", KeyPausedSince: since.Format(time.RFC3339)}, true,
			"since 2026-12-01 10:00 UTC by alice: freeze", ""},
		{"a since that is no time", map[string]string{KeyPaused: "freeze", KeyPausedSince: "yesterday"}, true, "freeze", `paused-since "yesterday"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, paused := PauseOf(tt.data)
			if paused != tt.paused {
				t.Fatalf("paused %v, want %v", paused, tt.paused)
			}
			if !paused {
				return
			}
			if got := o.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if (tt.issue == "") != (o.Problem == "") || !strings.Contains(o.Problem, tt.issue) {
				t.Errorf("Problem = %q, want it to name %q", o.Problem, tt.issue)
			}
		})
	}
}

func TestHoldOf(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		held        bool
		want        string
	}{
		{"no label", map[string]string{"a": "b"}, map[string]string{HoldReason: "ignored without the label"}, false, ""},
		{"label true", map[string]string{HoldLabel: "true"}, nil, true, noReasonGiven},
		{"the label's value is the reason", map[string]string{HoldLabel: "gpu-freeze"}, nil, true, "gpu-freeze"},
		{"the annotation wins", map[string]string{HoldLabel: "x"}, map[string]string{HoldReason: "firmware check", HoldBy: "bob"}, true, "by bob: firmware check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, held := HoldOf(&metav1.ObjectMeta{Labels: tt.labels, Annotations: tt.annotations})
			if held != tt.held {
				t.Fatalf("held %v, want %v", held, tt.held)
			}
			if held && o.String() != tt.want {
				t.Errorf("String() = %q, want %q", o.String(), tt.want)
			}
			// The lock's check at the commit says the same of the Node.
			err := HoldIn(&metav1.ObjectMeta{Name: "n1", Labels: tt.labels, Annotations: tt.annotations})
			if (err != nil) != held || held && err.Error() != "this node is held: "+tt.want+" (kured-host unhold n1)" {
				t.Errorf("HoldIn: %v, want held %v", err, held)
			}
		})
	}
}

// TestBlockers: the pause and the hold as the cycle sees them, including
// a read that fails, which blocks (block.Check) and, refused, says which
// grant is missing.
func TestBlockers(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Name}, Data: map[string]string{KeyPaused: "freeze"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{HoldLabel: "true"}}}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, Name, errors.New("no RBAC rule"))
	tests := []struct {
		name    string
		objects []runtime.Object
		err     error // every configmap read fails with it
		want    []string
	}{
		{"neither", []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}, nil, nil},
		{"paused and held", []runtime.Object{cm, node}, nil, []string{
			"paused: reboots are paused for the cluster: freeze (kured-host resume)",
			"held: this node is held: no reason given (kured-host unhold n1)"}},
		{"pause not readable", []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}, forbidden, []string{
			"paused: cannot tell, so waiting: node n1 may not read the ConfigMap kube-system/kured-host, where a pause is set: `kured-host rbac | kubectl apply -f -` grants it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset(tt.objects...)
			if tt.err != nil {
				c.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
			}
			r := Reader{Client: c, Node: "n1"}
			got := block.Check(context.Background(), []block.Blocker{Paused{r}, Held{r}})
			if len(got) != len(tt.want) {
				t.Fatalf("blocked by %v, want %q", got, tt.want)
			}
			for i, b := range got {
				if !strings.HasPrefix(b.String(), tt.want[i]) {
					t.Errorf("blocker %d: %q, want it to start with %q", i, b, tt.want[i])
				}
			}
			if paused := IsPaused(got); paused != (len(tt.want) > 0) {
				t.Errorf("IsPaused = %v", paused)
			}
			if only := OnlyPaused(got); only != (len(tt.want) == 1) {
				t.Errorf("OnlyPaused = %v", only)
			}
		})
	}
}
