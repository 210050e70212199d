package events

import (
	"context"
	"testing"
	"time"
)

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
			{0, "SlotAcquired", "a", true}, {time.Second, "Cordoned", "b", true},
			{2 * time.Second, "Drained", "c", true}, {3 * time.Second, "Rebooting", "d", true},
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
