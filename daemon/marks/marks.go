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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// kured's annotations (its --annotate-nodes).
const (
	InProgress       = "weave.works/kured-reboot-in-progress"
	MostRecentNeeded = "weave.works/kured-most-recent-reboot-needed"
)

// Marker writes the marks on one Node.
type Marker struct {
	Client kubernetes.Interface
	Node   string
	// Annotate sets kured's annotations.
	Annotate bool
	// Pre are set before the drain, Post after the reboot (a key in both
	// takes Post's value then).
	Pre, Post map[string]string
}

// Needed records when the node last found that it needs a reboot.
func (m *Marker) Needed(ctx context.Context, at time.Time) error {
	if !m.Annotate {
		return nil
	}
	return m.patch(ctx, nil, map[string]*string{MostRecentNeeded: ptr(at.UTC().Format(time.RFC3339))})
}

// Started marks the reboot as in progress: before the drain.
func (m *Marker) Started(ctx context.Context, at time.Time) error {
	var ann map[string]*string
	if m.Annotate {
		ann = map[string]*string{InProgress: ptr(at.UTC().Format(time.RFC3339))}
	}
	return m.patch(ctx, m.Pre, ann)
}

// Finished marks the reboot as done: after the reboot, before the node is
// uncordoned.
func (m *Marker) Finished(ctx context.Context) error {
	var ann map[string]*string
	if m.Annotate {
		ann = map[string]*string{InProgress: nil}
	}
	return m.patch(ctx, m.Post, ann)
}

// Cancelled takes the in-progress mark back when the reboot is given up
// before it happened (a failed drain); the labels stay as they are.
func (m *Marker) Cancelled(ctx context.Context) error {
	if !m.Annotate {
		return nil
	}
	return m.patch(ctx, nil, map[string]*string{InProgress: nil})
}

func ptr(s string) *string { return &s }

// patch merges labels and annotations (nil values remove) into the Node;
// nothing to change makes no request.
func (m *Marker) patch(ctx context.Context, labels map[string]string, annotations map[string]*string) error {
	if len(labels) == 0 && len(annotations) == 0 {
		return nil
	}
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("mark node %s: %w", m.Node, err)
	}
	if _, err := m.Client.CoreV1().Nodes().Patch(ctx, m.Node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("mark node %s: %w", m.Node, err)
	}
	return nil
}
