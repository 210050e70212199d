package cluster

import (
	"context"
	"slices"
	"time"
)

// Heartbeat is one of a kubelet stand-in's reports that keep its node
// alive in the control plane's eyes: a Lease renewal (every 10 s, as the
// kubelet's) or a status report (at registration and around a reboot).
// The benchmarks compare their latency in a busy second of a roll with the
// same cluster idle: a reboot tool whose requests share the kubelets'
// priority level must not slow them.
type Heartbeat struct {
	Node string
	Kind string // "lease" or "status"
	At   time.Time
	Took time.Duration
	Err  error
}

// heartbeats keeps the stand-ins' heartbeats, for Heartbeats.
type heartbeats struct {
	list []Heartbeat
}

// recordHeartbeat times f as one of host h's heartbeats.
func (h *SimHost) recordHeartbeat(ctx context.Context, kind string, f func(context.Context) error) error {
	start := time.Now()
	err := f(ctx)
	if ctx.Err() != nil {
		return err // cut short by the host's reboot or removal: no figure
	}
	cp := h.cp
	cp.mu.Lock()
	cp.beats.list = append(cp.beats.list, Heartbeat{Node: h.Name, Kind: kind, At: start, Took: time.Since(start), Err: err})
	cp.mu.Unlock()
	return err
}

// Heartbeats returns the stand-ins' heartbeats that started in [from, to),
// in the order they started, and forgets those that started before from.
func (cp *ControlPlane) Heartbeats(from, to time.Time) []Heartbeat {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.beats.list = slices.DeleteFunc(cp.beats.list, func(b Heartbeat) bool { return b.At.Before(from) })
	var out []Heartbeat
	for _, b := range cp.beats.list {
		if b.At.Before(to) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Heartbeat) int { return a.At.Compare(b.At) })
	return out
}
