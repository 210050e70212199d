package lock

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// MarkStopped marks node's waiting claim as its daemon's having stopped
// (the label queue.StoppedLabel), so that the node behind it passes it
// over at once rather than at its next resync; the daemon takes the label
// off when it writes its claim again. A claim that is not waiting is left
// alone: an active one keeps its slot until its daemon is back. It
// reports whether the claim is marked. The write is conditional on the
// Node as read: a claim that changed meanwhile is read again.
func MarkStopped(ctx context.Context, client kubernetes.Interface, node string) (bool, error) {
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read node %s: %w", node, err)
		}
		if n.Labels[claim.Label] != string(claim.Waiting) {
			return false, nil
		}
		if _, marked := n.Labels[queue.StoppedLabel]; marked {
			return true, nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion,
			"labels":          map[string]string{queue.StoppedLabel: "true"},
		}})
		if err != nil {
			return false, err
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case apierrors.IsConflict(err):
			continue
		case err != nil:
			return false, fmt.Errorf("mark node %s's waiting claim stopped: %w", node, err)
		}
		return true, nil
	}
}
