package queue

import (
	"testing"
	"time"
)

// TestJoinDelay: the joins of n nodes spread over n/JoinRate seconds, two
// minutes at most, each node's delay drawn within it.
func TestJoinDelay(t *testing.T) {
	last := func(x int64) int64 { return x - 1 } // the latest a draw gives
	tests := []struct {
		name string
		n    int
		draw func(int64) int64
		want time.Duration
	}{
		{"the count not known: at once", 0, last, 0},
		{"the earliest draw: at once", 500, func(int64) int64 { return 0 }, 0},
		{"25 nodes: within a second", 25, last, time.Second - 1},
		{"500 nodes: within 20 s", 500, last, 20*time.Second - 1},
		{"5,000 nodes: within the two minutes", 5000, last, JoinSpreadMax - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := JoinDelay(tt.n, tt.draw); got != tt.want {
				t.Errorf("JoinDelay(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}
