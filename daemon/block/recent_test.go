package block

import (
	"context"
	"errors"
	"testing"
	"time"
)

// answers is a blocker whose answers are scripted, one per read.
type answers struct {
	reads   int
	reasons []string
	errs    []error
}

func (a *answers) Kind() string { return "paused" }

func (a *answers) Check(context.Context) (string, error) {
	i := a.reads
	a.reads++
	return a.reasons[i], a.errs[i]
}

func TestRecent(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	boom := errors.New("connection refused")
	tests := []struct {
		name    string
		at      []time.Duration // when each look comes
		reasons []string        // what each read answers
		errs    []error
		want    []string // what each look sees
		wantErr []bool
		reads   int
	}{
		{"two looks within For: one read", []time.Duration{0, 900 * time.Millisecond},
			[]string{""}, []error{nil}, []string{"", ""}, []bool{false, false}, 1},
		{"a look past For reads again", []time.Duration{0, time.Second},
			[]string{"", "paused by alice"}, []error{nil, nil}, []string{"", "paused by alice"}, []bool{false, false}, 2},
		{"a blocked answer is kept too", []time.Duration{0, 500 * time.Millisecond},
			[]string{"paused by alice"}, []error{nil}, []string{"paused by alice", "paused by alice"}, []bool{false, false}, 1},
		{"an error is not kept", []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond},
			[]string{"", "held by bob"}, []error{boom, nil}, []string{"", "held by bob", "held by bob"}, []bool{true, false, false}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			a := &answers{reasons: tt.reasons, errs: tt.errs}
			r := &Recent{Blocker: a, For: time.Second, Now: func() time.Time { return now }}
			if r.Kind() != "paused" {
				t.Errorf("Kind() = %q, want the blocker's", r.Kind())
			}
			for i, at := range tt.at {
				now = t0.Add(at)
				got, err := r.Check(context.Background())
				if (err != nil) != tt.wantErr[i] {
					t.Errorf("look %d: err %v, want an error: %v", i, err, tt.wantErr[i])
				}
				if got != tt.want[i] {
					t.Errorf("look %d at %s: %q, want %q", i, at, got, tt.want[i])
				}
			}
			if a.reads != tt.reads {
				t.Errorf("%d reads, want %d", a.reads, tt.reads)
			}
		})
	}
}
