package drain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// began is a confirm's answer: the step at which it began.
type began int64

func (b began) Error() string { return fmt.Sprintf("confirm began at step %d", b) }

// TestSharedConfirm: evictions asked for while a confirm runs share the
// next one, and every caller's answer comes from a confirm that began
// after it asked.
func TestSharedConfirm(t *testing.T) {
	tests := []struct {
		name    string
		waiting int // callers that ask while the first confirm runs
		want    int64
	}{
		{"alone", 0, 1},
		{"one while one runs", 1, 2},
		{"thirty pods at once", 30, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var step, calls atomic.Int64
				release := make(chan struct{})
				s := &shared{confirm: func(context.Context) error {
					b := began(step.Add(1))
					if calls.Add(1) == 1 {
						<-release
					}
					return b
				}}
				ctx := t.Context()
				var mu sync.Mutex
				var bad []string
				ask := func(who string) {
					asked := step.Add(1)
					var b began
					if err := s.do(ctx); !errors.As(err, &b) {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%s: %v", who, err))
						mu.Unlock()
						return
					}
					if int64(b) <= asked {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%s asked at step %d and got the confirm that began at %d", who, asked, b))
						mu.Unlock()
					}
				}
				var wg sync.WaitGroup
				wg.Go(func() { ask("first") })
				synctest.Wait()
				for i := range tt.waiting {
					wg.Go(func() { ask(fmt.Sprint("caller ", i)) })
				}
				synctest.Wait()
				close(release)
				wg.Wait()
				for _, b := range bad {
					t.Error(b)
				}
				if got := calls.Load(); got != tt.want {
					t.Errorf("%d confirms for %d callers, want %d", got, tt.waiting+1, tt.want)
				}
			})
		})
	}
}

// TestSharedConfirmCancelled: a caller whose context ends while it waits
// gets the cause, and a later caller is not stuck behind it.
func TestSharedConfirmCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var calls atomic.Int64
		s := &shared{confirm: func(context.Context) error {
			if calls.Add(1) == 1 {
				<-release
			}
			return nil
		}}
		go func() { _ = s.do(t.Context()) }()
		synctest.Wait()
		ctx, cancel := context.WithCancelCause(t.Context())
		errGone := errors.New("drain stopped")
		done := make(chan error)
		go func() { done <- s.do(ctx) }()
		synctest.Wait()
		cancel(errGone)
		if err := <-done; !errors.Is(err, errGone) {
			t.Fatalf("cancelled caller got %v, want %v", err, errGone)
		}
		close(release)
		synctest.Wait()
		if err := s.do(t.Context()); err != nil {
			t.Fatalf("later caller: %v", err)
		}
		if got := calls.Load(); got != 2 {
			t.Errorf("%d confirms, want 2 (the first and the later caller's)", got)
		}
	})
}
