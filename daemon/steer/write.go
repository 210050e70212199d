package steer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The writes below are what `kured-host pause`, `resume`, `hold` and
// `unhold` do with an admin's credentials: merge patches that touch only
// their own keys, so that they compose with kubectl and with each other.

func since(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// nullable is a merge patch value: "" removes the key.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Pause pauses the cluster: the ConfigMap is created, or its pause keys
// replaced.
func Pause(ctx context.Context, c kubernetes.Interface, o Order) error {
	err := patchData(ctx, c, map[string]any{KeyPaused: o.Reason, KeyPausedBy: nullable(o.By), KeyPausedSince: nullable(since(o.Since))})
	if err != nil {
		return fmt.Errorf("pause: write the ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	return nil
}

// SetSettings writes the cluster's settings (validated by the caller).
func SetSettings(ctx context.Context, c kubernetes.Interface, text string) error {
	if err := patchData(ctx, c, map[string]any{KeySettings: text}); err != nil {
		return fmt.Errorf("write the cluster's settings to the ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	return nil
}

// patchData merge-patches the ConfigMap's data (a nil value removes the
// key), creating the ConfigMap if there is none.
func patchData(ctx context.Context, c kubernetes.Interface, data map[string]any) error {
	patch, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return err
	}
	cms := c.CoreV1().ConfigMaps(Namespace)
	_, err = cms.Patch(ctx, Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: map[string]string{"app.kubernetes.io/name": "kured-host"}},
		Data:       map[string]string{},
	}
	for k, v := range data {
		if s, ok := v.(string); ok {
			cm.Data[k] = s
		}
	}
	_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cms.Patch(ctx, Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	return err
}

// Hold holds node: the label, and the reason, who and since when in
// annotations (a label's value cannot hold a sentence).
func Hold(ctx context.Context, c kubernetes.Interface, node string, o Order) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{HoldLabel: "true"},
		"annotations": map[string]any{HoldReason: nullable(o.Reason), HoldBy: nullable(o.By), HoldSince: nullable(since(o.Since))},
	}})
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("hold node %s: %w", node, err)
	}
	return nil
}
