package block

import (
	"context"
	"sync"
	"time"
)

// Recent answers Check from the blocker's last answer while that is
// younger than For, measured from when its read began: two looks that
// come together (the one right before the announce, the one right before
// the cordon) cost one read. An answer that was an error is not kept.
type Recent struct {
	Blocker
	For time.Duration
	Now func() time.Time

	mu     sync.Mutex
	at     time.Time
	reason string
}

// Check implements Blocker.
func (r *Recent) Check(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Now()
	if !r.at.IsZero() && now.Sub(r.at) < r.For {
		return r.reason, nil
	}
	reason, err := r.Blocker.Check(ctx)
	if err != nil {
		r.at = time.Time{}
		return "", err
	}
	r.at, r.reason = now, reason
	return reason, nil
}
