// Package marks sets kured's signals on this node's own Node, for the
// dashboards, alerts and scripts that users of kured already have: the
// annotate-nodes annotations and the pre- and post-reboot labels. A node
// may change its own labels and annotations (NodeRestriction forbids only
// the node-restriction.kubernetes.io/ prefix and most kubernetes.io/
// labels); it may not set taints, so kured's PreferNoSchedule taint has no
// counterpart here.
package marks

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// kured's annotations (its --annotate-nodes).
const (
	InProgress       = "weave.works/kured-reboot-in-progress"
	MostRecentNeeded = "weave.works/kured-most-recent-reboot-needed"
)

// Marker writes the marks on one Node, when kured writes them:
//
//   - the in-progress and most-recent-reboot-needed annotations (with
//     Annotate) as soon as a reboot is needed and the window is open, even
//     while something else blocks it (kured PR #749); the in-progress one
//     is removed after the reboot, or when the need goes away without one;
//   - the pre-reboot labels when the drain starts (after the cordon);
//   - the post-reboot labels after the reboot, just before the uncordon,
//     and when a reboot is given up after a failed drain or a lost slot:
//     the node is back in service either way, and kured's best-effort
//     uncordon after a failed drain sets them too. A rule written for
//     kured's pair (rebooting=true, then rebooting=false) sees it back.
type Marker struct {
	Client kubernetes.Interface
	Node   string
	// Annotate sets kured's annotations.
	Annotate bool
	// Pre are set when the drain starts, Post after the reboot or when it
	// is given up (a key in both takes Post's value then).
	Pre, Post map[string]string
	// Observe, if set, is given the Node as each mark left it: the
	// lock's next claim write is conditional on the Node's version and
	// builds on it (lock.Lock.Observe) instead of meeting a conflict.
	Observe func(*corev1.Node)
}

// Change is what a mark changes on the Node: labels to set, annotations
// to set or (nil) remove. Marker's methods say what each mark changes;
// Write writes one alone, and the lock writes one in its claim write
// when a mark and a claim write come together (lock.Lock.Join, Cordon,
// ReleaseUncordoned): one request for both.
type Change struct {
	Labels      map[string]string
	Annotations map[string]*string
}

// Empty reports whether c changes nothing.
func (c Change) Empty() bool { return len(c.Labels) == 0 && len(c.Annotations) == 0 }

// Merge is c with o's changes added; o's value wins for a key in both.
func (c Change) Merge(o Change) Change {
	out := Change{}
	if len(c.Labels)+len(o.Labels) > 0 {
		out.Labels = maps.Clone(c.Labels)
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		maps.Copy(out.Labels, o.Labels)
	}
	if len(c.Annotations)+len(o.Annotations) > 0 {
		out.Annotations = maps.Clone(c.Annotations)
		if out.Annotations == nil {
			out.Annotations = map[string]*string{}
		}
		maps.Copy(out.Annotations, o.Annotations)
	}
	return out
}

// InProgress marks the reboot as in progress and needed since at, as
// kured does: once per need (the caller knows whether the node has the
// mark already), in the window, blocked or not.
func (m *Marker) InProgress(at time.Time) Change {
	if !m.Annotate {
		return Change{}
	}
	t := at.UTC().Format(time.RFC3339)
	return Change{Annotations: map[string]*string{InProgress: &t, MostRecentNeeded: &t}}
}

// Started sets the pre-reboot labels: the drain starts.
func (m *Marker) Started() Change { return Change{Labels: m.Pre} }

// Finished marks the reboot as done: after the reboot, before the node is
// uncordoned.
func (m *Marker) Finished() Change {
	c := Change{Labels: m.Post}
	if m.Annotate {
		c.Annotations = map[string]*string{InProgress: nil}
	}
	return c
}

// GaveUp marks a reboot given up (a failed drain, a lost slot) with the
// post-reboot labels. The in-progress annotation stays, as kured leaves
// it: the reboot is still needed.
func (m *Marker) GaveUp() Change { return Change{Labels: m.Post} }

// NotNeeded takes the in-progress mark back when the need went away
// without a reboot by kured-host (the sentinel removed, a reboot by
// hand). kured leaves it until its next reboot; a mark that says "in
// progress" on a node with nothing to do would mislead the tools that
// read it.
func (m *Marker) NotNeeded() Change {
	if !m.Annotate {
		return Change{}
	}
	return Change{Annotations: map[string]*string{InProgress: nil}}
}

// Write merges c into the Node; nothing to change makes no request.
func (m *Marker) Write(ctx context.Context, c Change) error {
	if c.Empty() {
		return nil
	}
	meta := map[string]any{}
	if len(c.Labels) > 0 {
		meta["labels"] = c.Labels
	}
	if len(c.Annotations) > 0 {
		meta["annotations"] = c.Annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("mark node %s: %w", m.Node, err)
	}
	n, err := m.Client.CoreV1().Nodes().Patch(ctx, m.Node, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("mark node %s: %w", m.Node, err)
	}
	if m.Observe != nil {
		m.Observe(n)
	}
	return nil
}
