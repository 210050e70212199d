package drain

import (
	"context"
	"sync"
)

// shared lets the drain library's concurrent evictions share their
// confirmations. The library evicts every pod at once, each in its own
// goroutine, and retries each refused one on its own clock; one read of
// the claim per eviction is one GET per pod. Here each caller still gets
// the answer of a confirm that began after it asked, as its own read
// would, so an eviction never follows a read older than its decision:
// callers that ask while a confirm runs wait for it to end and share the
// next one.
type shared struct {
	confirm func(context.Context) error

	mu      sync.Mutex
	running *round // the confirm under way, if any
	next    *round // the one the callers that ask now will share
}

type round struct {
	done chan struct{}
	err  error
}

func (s *shared) do(ctx context.Context) error {
	s.mu.Lock()
	if r := s.next; r != nil {
		s.mu.Unlock()
		return r.wait(ctx)
	}
	r := &round{done: make(chan struct{})}
	s.next = r
	prev := s.running
	s.mu.Unlock()
	// This caller leads the round: it waits out the confirm under way,
	// which began before some of the round's callers asked, then runs
	// the round's own.
	if prev != nil {
		if err := prev.wait(ctx); err != nil && ctx.Err() != nil {
			s.mu.Lock()
			s.next = nil
			s.mu.Unlock()
			r.err = err
			close(r.done)
			return err
		}
	}
	s.mu.Lock()
	s.next, s.running = nil, r
	s.mu.Unlock()
	r.err = s.confirm(ctx)
	s.mu.Lock()
	if s.running == r {
		s.running = nil
	}
	s.mu.Unlock()
	close(r.done)
	return r.err
}

func (r *round) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
