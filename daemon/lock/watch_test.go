package lock

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// TestWatchEndWakes: a node in the front waits on its watch of the
// claims, trusted. When the watch's streams end and the server refuses
// the next ones (an outage: client-go lists again only after its
// back-off, up to half a minute), the waiting node is woken, and sees the
// watch stale, so that it reads the front directly: a slot freed meanwhile
// is not left waiting for the back-off (TestSim seed 190). When the server
// ends the streams and the next ones open at once (its watch timeout), the
// waiting node is not woken and the watch stays trusted: no read for it.
func TestWatchEndWakes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		down      bool
		wantWoken bool
	}{
		{"the server ends the streams and is back at once", false, false},
		{"the server ends the streams and refuses new ones", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				since := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
				own := claim.Limits{Concurrency: 1}
				me := waitingNode(t, "me", "zone-a", claim.Claim{Since: since, Updated: since, Limits: own}, queue.RoleIn)
				holder := claimedNode(t, "h1", "zone-a", claim.Claim{State: claim.Holding, Since: since, Updated: since, Limits: own})
				holder.Labels[queue.FrontLabel] = string(queue.RoleIn)
				client := fake.NewClientset(me, holder)

				var mu sync.Mutex
				var streams []watch.Interface
				down := false
				refused := errors.New("connect: connection refused")
				client.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
					mu.Lock()
					defer mu.Unlock()
					if down {
						return true, nil, refused
					}
					wa, _ := a.(k8stesting.WatchActionImpl)
					if wa.ListOptions.SendInitialEvents != nil {
						// The fake's tracker cannot stream a list: the
						// reflector lists and watches instead.
						return true, nil, errors.New("watch-list not served")
					}
					w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), wa.ListOptions)
					if err == nil {
						streams = append(streams, w)
					}
					return true, w, err
				})
				client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					mu.Lock()
					defer mu.Unlock()
					if down {
						return true, nil, refused
					}
					return false, nil, nil
				})

				l := New(Options{Client: client, Node: "me", Limits: own})
				ctx := t.Context()
				l.base = ctx
				if _, _, err := l.Own(ctx); err != nil {
					t.Fatal(err)
				}
				if err := l.ensureWatch(ctx); err != nil {
					t.Fatal(err)
				}
				defer l.stopWatch()
				synctest.Wait()
				w := l.watching()
				if w == nil || w.stale() {
					t.Fatal("the watch is not trusted once its caches filled")
				}
				drain := func() bool {
					select {
					case <-l.changed:
						return true
					default:
						return false
					}
				}
				// Minutes on, as a server's watch timeout comes: a stream
				// that ends within a second is a failure to client-go.
				time.Sleep(5 * time.Minute)
				synctest.Wait()
				for drain() {
				}

				mu.Lock()
				down = tt.down
				ended := streams
				streams = nil
				mu.Unlock()
				for _, s := range ended {
					s.Stop() // the server ends the stream
				}
				time.Sleep(streamGap + 100*time.Millisecond)
				synctest.Wait()
				if woken := drain(); woken != tt.wantWoken {
					t.Errorf("the waiting node woken: %v, want %v", woken, tt.wantWoken)
				}
				if stale := w.stale(); stale != tt.down {
					t.Errorf("the watch stale: %v, want %v", stale, tt.down)
				}
			})
		})
	}
}
