package events

import (
	"context"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestEmitNamesAreRandom: each Emit is an Event of its own, even two at
// the same instant with the same reason, under a name with 16 random hex
// digits that no other node can tell in advance; a name that is taken is
// an error, never "already reported".
func TestEmitNamesAreRandom(t *testing.T) {
	at := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	client := fake.NewClientset()
	r := &Recorder{Client: client, Host: "n1", Now: func() time.Time { return at }}
	ctx := context.Background()
	for range 2 {
		if err := r.Emit(ctx, "n1", corev1.EventTypeNormal, "Rebooting", "rebooting now"); err != nil {
			t.Fatal(err)
		}
	}
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	random := regexp.MustCompile(`^n1\.kured-host\.[0-9a-f]{16}$`)
	names := map[string]bool{}
	for _, e := range list.Items {
		if !random.MatchString(e.Name) || e.Source.Host != "n1" || e.InvolvedObject.Name != "n1" || !e.FirstTimestamp.Time.Equal(at) {
			t.Errorf("event %s from %s on %s at %s", e.Name, e.Source.Host, e.InvolvedObject.Name, e.FirstTimestamp)
		}
		names[e.Name] = true
	}
	if len(names) != 2 {
		t.Errorf("events %v, want two under different names", names)
	}
	if n := eventName("n1"); names[n] || n == eventName("n1") {
		t.Errorf("the next names repeat: %s", n)
	}
	client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("events"), "taken")
	})
	if err := r.Emit(ctx, "n1", corev1.EventTypeWarning, "HolderAlarm", "stuck"); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a taken name: %v, want the AlreadyExists error", err)
	}
}

type recorded struct{ reasons []string }

func (r *recorded) Emit(_ context.Context, _, _, reason, message string) error {
	r.reasons = append(r.reasons, reason+": "+message)
	return nil
}

func TestLimited(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	type emit struct {
		at              time.Duration
		reason, message string
		want            bool
	}
	for _, tc := range []struct {
		name  string
		emits []emit
	}{
		{"a cycle's transitions all pass", []emit{
			{0, "RebootRequired", "a", true}, {time.Second, "SlotAcquired", "b", true},
			{2 * time.Second, "Rebooting", "c", true}, {3 * time.Second, "Rebooted", "d", true},
		}},
		{"a stuck state is recorded once an hour", []emit{
			{0, "Blocked", "window", true}, {2 * time.Minute, "Blocked", "window", false},
			{59 * time.Minute, "Blocked", "window", false}, {61 * time.Minute, "Blocked", "window", true},
		}},
		{"a changing message is spaced", []emit{
			{0, "RebootOverdue", "15m", true}, {30 * time.Second, "RebootOverdue", "15m30s", false},
			{90 * time.Second, "RebootOverdue", "16m30s", true},
		}},
		{"a new blocker is told after the spacing", []emit{
			{0, "Blocked", "window", true}, {2 * time.Minute, "Blocked", "inhibitor apt", true},
			{4 * time.Minute, "Blocked", "window", false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			sink := &recorded{}
			l := &Limited{Sink: sink, Now: func() time.Time { return now }, Repeat: time.Hour, Spacing: time.Minute}
			for _, e := range tc.emits {
				now = t0.Add(e.at)
				before := len(sink.reasons)
				if err := l.Emit(context.Background(), "n1", "Normal", e.reason, e.message); err != nil {
					t.Fatal(err)
				}
				if got := len(sink.reasons) > before; got != e.want {
					t.Errorf("at +%s %s %q: recorded %v, want %v", e.at, e.reason, e.message, got, e.want)
				}
			}
		})
	}
}
