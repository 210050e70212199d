package lock

import (
	"slices"
	"testing"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
)

// The protocol itself is tested on a real API server in
// test/cluster/locktest; these are its pure helpers.

func TestLimitsFrom(t *testing.T) {
	got := LimitsFrom(config.Default().Lock)
	want := claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: config.ZoneLabel, Max: 1}}}
	if got.Concurrency != want.Concurrency || !slices.Equal(got.Groups, want.Groups) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestPublishedIsTheStricter(t *testing.T) {
	tests := []struct {
		name      string
		own, prev claim.Limits
		want      claim.Limits
	}{
		{"first announce", claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: "z", Max: 2}}}, claim.Limits{},
			claim.Limits{Concurrency: 3, Groups: []claim.GroupLimit{{Label: "z", Max: 2}}}},
		{"restarted with a laxer config keeps what it published", claim.Limits{Concurrency: 5}, claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}},
			claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}}},
		{"restarted with a stricter config publishes it", claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}}, claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: "z", Max: 2}}},
			claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: "z", Max: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(Options{Limits: tt.own})
			got := l.published(tt.prev)
			if got.Concurrency != tt.want.Concurrency || !slices.Equal(got.Groups, tt.want.Groups) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
