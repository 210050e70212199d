package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// ReadyWatch is one wait for a Node to be Ready in a boot: after a
// reboot, until the kubelet reports the new boot and Ready. It reads the
// Node by watching it (whole, by name: the Ready condition is in its
// status), so that the wait costs one request however long it is, and
// ends when the kubelet's report arrives rather than at the next poll.
// A watch that ends or fails is replaced by a new one.
//
// The kubelet reports the boot ID and the Ready condition together, so a
// Node still showing an older boot carries a Ready condition from before
// the reboot: without graceful node shutdown it stays True until the
// node controller's grace period runs out, long after the reboot.
type ReadyWatch struct {
	Client kubernetes.Interface
	Node   string
	// Boot is the ID of the boot the Node must report.
	Boot func() (string, error)
	// Observe, if set, is given each Node read: the release that follows
	// a Ready node is a conditional write, and the kubelet's own report
	// of the boot changed the Node since the lock last read it
	// (lock.Lock.Observe).
	Observe func(*corev1.Node)

	last    *corev1.Node
	w       watch.Interface
	started bool
}

// Next reports whether the Node is Ready in this boot, and if not why.
// The first call opens the watch, whose first event is the Node as it is
// now (a watch without a resourceVersion starts at the latest, as a GET
// reads: one request both reads and watches), and waits for that event
// up to wait (at least firstEvent); each later call waits up to wait for
// a change. A watch that cannot be opened, or that ended, is opened
// again after wait, not in a loop. A watch whose events lag is kept:
// until its first event the Node is reported not read yet. Stop ends
// the watch.
func (r *ReadyWatch) Next(ctx context.Context, wait time.Duration) (bool, string, error) {
	if r.w == nil {
		if r.started {
			if err := sleepCtx(ctx, wait); err != nil {
				return false, "", err
			}
		}
		r.started = true
		w, err := r.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + r.Node})
		if err != nil {
			return false, "", fmt.Errorf("watch node %s: %w", r.Node, err)
		}
		r.w = w
		wait = max(wait, firstEvent)
	}
	r.await(ctx, wait)
	if ctx.Err() != nil {
		return false, "", context.Cause(ctx)
	}
	if r.last == nil {
		return false, "the Node has not been read yet (its watch has sent nothing)", nil
	}
	boot, err := r.Boot()
	if err != nil {
		return false, "", err
	}
	return readyIn(r.last, boot)
}

// firstEvent is how long, at the least, the first call waits for the
// watch's first event: the API server sends the Node at once when there
// is one and its watch cache keeps up.
const firstEvent = 2 * time.Second

// await takes the watch's events until one changes the Node or wait has
// passed. A watch that ends is stopped: the next call opens another.
func (r *ReadyWatch) await(ctx context.Context, wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	case ev, ok := <-r.w.ResultChan():
		n, isNode := ev.Object.(*corev1.Node)
		switch {
		case !ok || ev.Type == watch.Error || ev.Type == watch.Deleted:
			r.Stop()
		case isNode:
			r.saw(n)
		}
	}
}

func (r *ReadyWatch) saw(n *corev1.Node) {
	r.last = n
	if r.Observe != nil {
		r.Observe(n)
	}
}

// Stop ends the watch.
func (r *ReadyWatch) Stop() {
	if r.w != nil {
		r.w.Stop()
		r.w = nil
	}
}

// readyIn reports whether n is Ready in the boot bootID, and if not why.
func readyIn(n *corev1.Node, bootID string) (bool, string, error) {
	if got := n.Status.NodeInfo.BootID; got != bootID {
		return false, fmt.Sprintf("the kubelet has not reported this boot yet (the Node shows boot %.8s, this is %.8s)", got, bootID), nil
	}
	if Ready(n) {
		return true, "", nil
	}
	return false, "the node is not Ready yet", nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
