package benchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/kured-host/kured-host/test/cluster"
)

// The kured-style baseline: kured's lock (pkg/daemonsetlock, the
// multi-owner form) and its reboot loop (cmd/kured rebootAsRequired), on
// the same simulated hosts. One annotation on kured's DaemonSet holds up
// to maxOwners entries; a node takes an entry by read-modify-write of the
// whole DaemonSet, conditional on its resourceVersion (an Update), and
// gives it back the same way. Each node polls on kured's delaytick: the
// first tick after a uniformly random delay in [period/2, 3·period/2],
// then every period. kured's fixed times are scaled with the period
// (1 h by default): the start-up check after a reboot (1 min) becomes
// period/60, the retry after a conflict (1 s) period/3600.
//
// Two departures from kured, both in its favour or neutral: the entries
// also record the node's zone and an entry is refused when its zone is
// full (kured has no group limits; the benchmark's group limit is chosen
// not to bind), and "drain" is the same cordon-and-hold as the slot
// lock's driver.
const (
	kuredAnnotation = "weave.works/kured-node-lock"
	kuredNamespace  = "kube-system"
	kuredDefault    = time.Hour // kured's --period
)

// kuredEntry is one holder in the annotation (kured's
// LockAnnotationValue, plus the zone).
type kuredEntry struct {
	NodeID   string `json:"nodeID"`
	Metadata struct {
		Unschedulable bool `json:"unschedulable"`
	} `json:"metadata,omitempty"`
	Created time.Time     `json:"created"`
	TTL     time.Duration `json:"TTL"`
	Zone    string        `json:"zone,omitempty"`
}

// kuredLock is the annotation's value (kured's multiLockAnnotationValue).
type kuredLock struct {
	MaxOwners int          `json:"maxOwners"`
	Locks     []kuredEntry `json:"locks"`
}

func parseKuredLock(ds *appsv1.DaemonSet) (kuredLock, error) {
	var v kuredLock
	s, ok := ds.Annotations[kuredAnnotation]
	if !ok {
		return v, nil
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return v, fmt.Errorf("lock annotation on %s: %w", ds.Name, err)
	}
	return v, nil
}

// kuredNode is kured's DaemonSet pod on one host.
type kuredNode struct {
	h      *cluster.SimHost
	client kubernetes.Interface // kured's own (admin) identity
	ds     string               // the lock DaemonSet in kuredNamespace
	zone   string
	// maxOwners is kured's --concurrency; zoneMax the group limit.
	maxOwners, zoneMax int
	period, hold       time.Duration
	rand               *rand.Rand
	started            func()
}

// delay is delaytick's first wait: uniform in [d/2, 3d/2].
func (k *kuredNode) delay(d time.Duration) time.Duration {
	return d/2 + time.Duration(k.rand.Int64N(int64(d)+1))
}

func (k *kuredNode) run(ctx context.Context) error {
	// Start-up: one tick of delaytick(1 min); a holder uncordons and
	// releases.
	if err := sleep(ctx, k.delay(k.period/60)); err != nil {
		return err
	}
	held, entry, err := k.holding(ctx)
	if err != nil {
		return err
	}
	if held {
		if _, err := k.client.CoreV1().Nodes().Get(ctx, k.h.Name, metav1.GetOptions{}); err != nil {
			return err
		}
		if !entry.Metadata.Unschedulable {
			if _, err := setUnschedulable(ctx, k.client, k.h.Name, false); err != nil {
				return err
			}
		}
		if err := k.release(ctx); err != nil {
			return err
		}
	}
	k.started()
	// The reboot loop: delaytick(period).
	if err := sleep(ctx, k.delay(k.period)); err != nil {
		return err
	}
	t := time.NewTicker(k.period)
	defer t.Stop()
	for {
		if k.h.RebootRequired() {
			done, err := k.tick(ctx)
			if done || err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// tick is one pass of kured's loop with a reboot required: read the node,
// take the lock if it is not held, drain and reboot.
func (k *kuredNode) tick(ctx context.Context) (bool, error) {
	n, err := k.client.CoreV1().Nodes().Get(ctx, k.h.Name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	held, _, err := k.holding(ctx)
	if err != nil {
		return false, err
	}
	if !held {
		ok, err := k.acquire(ctx, n.Spec.Unschedulable)
		if err != nil || !ok {
			return false, err
		}
	}
	if _, err := setUnschedulable(ctx, k.client, k.h.Name, true); err != nil {
		return false, err
	}
	if err := sleep(ctx, k.hold); err != nil {
		return false, err
	}
	return true, reboot(ctx, k.h)
}

func (k *kuredNode) get(ctx context.Context) (*appsv1.DaemonSet, kuredLock, error) {
	ds, err := k.client.AppsV1().DaemonSets(kuredNamespace).Get(ctx, k.ds, metav1.GetOptions{})
	if err != nil {
		return nil, kuredLock{}, err
	}
	v, err := parseKuredLock(ds)
	return ds, v, err
}

// holding is kured's Holding: one GET.
func (k *kuredNode) holding(ctx context.Context) (bool, kuredEntry, error) {
	_, v, err := k.get(ctx)
	if err != nil {
		return false, kuredEntry{}, err
	}
	for _, e := range v.Locks {
		if e.NodeID == k.h.Name {
			return true, e, nil
		}
	}
	return false, kuredEntry{}, nil
}

// acquire is kured's Acquire: GET, and if there is room an Update; after a
// conflict, wait and start over.
func (k *kuredNode) acquire(ctx context.Context, unschedulable bool) (bool, error) {
	for {
		ds, v, err := k.get(ctx)
		if err != nil {
			return false, err
		}
		inZone := 0
		for _, e := range v.Locks {
			if e.Zone == k.zone {
				inZone++
			}
		}
		if len(v.Locks) >= k.maxOwners || inZone >= k.zoneMax {
			return false, nil
		}
		e := kuredEntry{NodeID: k.h.Name, Created: time.Now().UTC(), Zone: k.zone}
		e.Metadata.Unschedulable = unschedulable
		v.MaxOwners = k.maxOwners
		v.Locks = append(v.Locks, e)
		ok, err := k.update(ctx, ds, v)
		if err != nil || ok {
			return ok, err
		}
		if err := sleep(ctx, k.period/3600); err != nil {
			return false, err
		}
	}
}

// release is kured's Release: GET, drop the own entry, Update; retry after
// a conflict.
func (k *kuredNode) release(ctx context.Context) error {
	for {
		ds, v, err := k.get(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(v.Locks, func(e kuredEntry) bool { return e.NodeID == k.h.Name })
		if i < 0 {
			return fmt.Errorf("%s: lock not held", k.h.Name)
		}
		v.Locks = slices.Delete(v.Locks, i, i+1)
		ok, err := k.update(ctx, ds, v)
		if err != nil || ok {
			return err
		}
		if err := sleep(ctx, k.period/3600); err != nil {
			return err
		}
	}
}

// update writes the annotation with an Update of the DaemonSet as read:
// false on a conflict.
func (k *kuredNode) update(ctx context.Context, ds *appsv1.DaemonSet, v kuredLock) (bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[kuredAnnotation] = string(b)
	_, err = k.client.AppsV1().DaemonSets(kuredNamespace).Update(ctx, ds, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// kuredAuditor watches the lock DaemonSet with admin rights and records
// every revision of the annotation: when each entry appeared and went.
type kuredAuditor struct {
	ds      string // deleted by stop
	mu      sync.Mutex
	current map[string]time.Time // node -> when its entry appeared
	zones   map[string]string
	given   []slot // slots taken and given back
	// violations: more entries than k, or than the group limit in a zone.
	violations []string
	err        error
	cancel     context.CancelFunc
	done       chan struct{}
}

func startKuredAuditor(ctx context.Context, ds *appsv1.DaemonSet, k, zoneMax int) (*kuredAuditor, error) {
	a := &kuredAuditor{current: map[string]time.Time{}, zones: map[string]string{}, done: make(chan struct{})}
	sel := fields.OneTermEqualSelector("metadata.name", ds.Name).String()
	w, err := watchtools.NewRetryWatcherWithContext(ctx, ds.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cp.Admin.AppsV1().DaemonSets(kuredNamespace).Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	go func() {
		defer close(a.done)
		defer w.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if d, ok := ev.Object.(*appsv1.DaemonSet); ok && ev.Type == watch.Modified {
					a.record(d, k, zoneMax)
				}
			}
		}
	}()
	return a, nil
}

func (a *kuredAuditor) record(ds *appsv1.DaemonSet, k, zoneMax int) {
	now := time.Now()
	v, err := parseKuredLock(ds)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.err = err
		return
	}
	seen := map[string]bool{}
	perZone := map[string]int{}
	for _, e := range v.Locks {
		seen[e.NodeID] = true
		perZone[e.Zone]++
		if _, ok := a.current[e.NodeID]; !ok {
			a.current[e.NodeID] = now
			a.zones[e.NodeID] = e.Zone
		}
	}
	for node, since := range a.current {
		if !seen[node] {
			a.given = append(a.given, slot{node: node, held: since, released: now})
			delete(a.current, node)
		}
	}
	if len(v.Locks) > k {
		a.violations = append(a.violations, fmt.Sprintf("rv %s: %d holders, limit %d", ds.ResourceVersion, len(v.Locks), k))
	}
	for z, n := range perZone {
		if n > zoneMax {
			a.violations = append(a.violations, fmt.Sprintf("rv %s: %d holders in zone %s, limit %d", ds.ResourceVersion, n, z, zoneMax))
		}
	}
}

// slots returns the slots taken and given back, and how many are held.
func (a *kuredAuditor) slots(context.Context) ([]slot, int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.given), len(a.current), a.err
}

// check returns the limits broken at any revision.
func (a *kuredAuditor) check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.violations) > 0 {
		return fmt.Errorf("kured-style lock: %d violation(s): %v", len(a.violations), a.violations)
	}
	return a.err
}

// stop ends the watch and deletes the lock DaemonSet.
func (a *kuredAuditor) stop() {
	a.cancel()
	<-a.done
	_ = cp.Admin.AppsV1().DaemonSets(kuredNamespace).Delete(context.Background(), a.ds, metav1.DeleteOptions{})
}
