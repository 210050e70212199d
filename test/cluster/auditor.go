package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/internal/audit"
)

// NodeState is what the auditor records of a Node at one revision
// (internal/audit, shared with the simulator).
type NodeState = audit.NodeState

// Violation is a broken invariant at a revision.
type Violation = audit.Violation

// Acquisition is one slot taken and given back.
type Acquisition = audit.Acquisition

// Auditor records every change of every Node, in resourceVersion order,
// through one admin watch, and checks the invariants over the record.
type Auditor struct {
	cp *ControlPlane
	// Scope, when set, limits the checks to the nodes it accepts (the
	// nodes of one test, on a control plane that several tests share).
	Scope func(node string) bool

	mu      sync.Mutex
	history []NodeState
	lastRV  uint64
	err     error
	cancel  context.CancelFunc
	done    chan struct{}
}

// StartAuditor lists the Nodes and watches them from that revision on.
func (cp *ControlPlane) StartAuditor(ctx context.Context) (*Auditor, error) {
	list, err := cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("auditor: list nodes: %w", err)
	}
	a := &Auditor{cp: cp, done: make(chan struct{})}
	for i := range list.Items {
		a.record(&list.Items[i], false, list.ResourceVersion)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.AllowWatchBookmarks = true
			return cp.Admin.CoreV1().Nodes().Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auditor: watch nodes: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	go a.run(wctx, w)
	return a, nil
}

func (a *Auditor) run(ctx context.Context, w *watchtools.RetryWatcher) {
	defer close(a.done)
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				a.mu.Lock()
				a.err = errors.New("auditor: watch ended")
				a.mu.Unlock()
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				n := ev.Object.(*corev1.Node)
				a.record(n, ev.Type == watch.Deleted, n.ResourceVersion)
			case watch.Bookmark:
				if m, err := metaRV(ev.Object); err == nil {
					a.mu.Lock()
					a.lastRV = max(a.lastRV, m)
					a.mu.Unlock()
				}
			case watch.Error:
				a.mu.Lock()
				a.err = fmt.Errorf("auditor: watch error: %v", ev.Object)
				a.mu.Unlock()
			}
		}
	}
}

func metaRV(obj any) (uint64, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return 0, errors.New("not a node")
	}
	return strconv.ParseUint(n.ResourceVersion, 10, 64)
}

func (a *Auditor) record(n *corev1.Node, deleted bool, rv string) {
	v, _ := strconv.ParseUint(rv, 10, 64)
	s := audit.StateOf(n, v, deleted, time.Now())
	a.mu.Lock()
	a.history = append(a.history, s)
	a.lastRV = max(a.lastRV, v)
	a.mu.Unlock()
}

// Stop ends the watch.
func (a *Auditor) Stop() {
	a.cancel()
	<-a.done
}

// Sync waits until the auditor has seen every change made so far.
func (a *Auditor) Sync(ctx context.Context) error {
	list, err := a.cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		return err
	}
	// The list's revision may belong to another kind of object; the newest
	// node revision at or below it is what the watch must reach.
	var newest uint64
	for _, n := range list.Items {
		v, _ := strconv.ParseUint(n.ResourceVersion, 10, 64)
		newest = max(newest, v)
	}
	want = min(want, newest)
	for {
		a.mu.Lock()
		last, err := a.lastRV, a.err
		a.mu.Unlock()
		if err != nil {
			return err
		}
		if last >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("auditor at revision %d, want %d: %w", last, want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// History returns the recorded states in revision order.
func (a *Auditor) History() []NodeState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.history)
}

func (a *Auditor) audit() audit.History {
	return audit.History{States: a.History(), Scope: a.Scope}
}

// Check runs every check and returns the violations as one error.
func (a *Auditor) Check(limits claim.Limits) error {
	a.mu.Lock()
	err := a.err
	a.mu.Unlock()
	if err != nil {
		return err
	}
	return audit.Errors(a.audit().Check(limits))
}

// CheckLimits: at every revision, no more holders than limits.Concurrency
// in the cluster, and no more than each group's max among nodes with the
// same value of the group's label.
func (a *Auditor) CheckLimits(limits claim.Limits) []Violation { return a.audit().CheckLimits(limits) }

// CheckRebootsHeld: a node's boot ID changes only while it holds a slot.
func (a *Auditor) CheckRebootsHeld() []Violation { return a.audit().CheckRebootsHeld() }

// CheckReleases: a holder gives up its claim only after a reboot, or
// after an abort that left the node as it found it.
func (a *Auditor) CheckReleases() []Violation { return a.audit().CheckReleases() }

// CheckNotLeftCordoned: a node that kured-host cordoned is schedulable
// again once it no longer takes part.
func (a *Auditor) CheckNotLeftCordoned() []Violation { return a.audit().CheckNotLeftCordoned() }

// CheckPublishedLimits: no holder is in a domain with more holders than
// the limit it published.
func (a *Auditor) CheckPublishedLimits() []Violation { return a.audit().CheckPublishedLimits() }

// Acquisitions lists every slot taken, in the order taken.
func (a *Auditor) Acquisitions() []Acquisition { return a.audit().Acquisitions() }

// MaxHolders is the most holders seen at once in the cluster, and in any
// one value of label (if label is not "").
func (a *Auditor) MaxHolders(label string) (cluster, group int) { return a.audit().MaxHolders(label) }
