package steer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/printable"
)

// `kured-host resume` and `unhold` lift the order they read, and no
// other: the write is conditional on the object's resourceVersion as
// read. Another pause or hold set between the read and the write is left
// in force, and the operator is told; a change to anything else of the
// object (the cluster's settings, another label, the Node's status,
// which its kubelet writes every few seconds) is read again and the
// write retried.

// maxTries bounds the writes of one lift: each retry follows a change to
// the object that left the order as it was. A Node's kubelet writes its
// status every 10 s or so, and its daemon a few times a cycle: a write
// that loses to one of those wins the next try; 20 tries lose only to a
// writer that changes the Node all the time.
const maxTries = 20

// ErrChanged is a pause or hold replaced between the read and the
// conditional write: it was not lifted (ChangedError says what it is now).
var ErrChanged = errors.New("the order changed since it was read")

// ChangedError says which order changed, what it was and what it is now.
type ChangedError struct {
	What  string // "the cluster's pause", "node gpu-1's hold"
	Was   Seen
	Now   Seen
	Again string // the command that lifts it: "kured-host resume"
}

func (e *ChangedError) Error() string {
	was := "not in force"
	if e.Was.On {
		was = e.Was.Order.String()
	}
	return fmt.Sprintf("%s changed after it was read, so it was not lifted: it is now %s (it was %s); run %s again if you still mean to lift it",
		printable.String(e.What), printable.String(e.Now.Order.String()), printable.String(was), printable.String(e.Again))
}

// Is makes errors.Is(err, ErrChanged) true.
func (e *ChangedError) Is(target error) bool { return target == ErrChanged }

// Seen is a pause or a hold as it was read, with what a write
// conditional on it needs: the object's resourceVersion and the order's
// own keys as they were.
type Seen struct {
	Order Order
	On    bool // paused, or held
	// version is the object's resourceVersion; "" when there was none.
	version string
	// keys are the order's keys that were present, with their values.
	keys map[string]string
}

var pauseKeys = []string{KeyPaused, KeyPausedBy, KeyPausedSince}

// holdKeys are the hold's annotations (its label is HoldLabel).
var holdKeys = []string{HoldReason, HoldBy, HoldSince}

// ReadPause reads the cluster's pause for LiftPause.
func ReadPause(ctx context.Context, c kubernetes.Interface) (Seen, error) {
	cm, err := c.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Seen{}, nil
	case err != nil:
		return Seen{}, fmt.Errorf("read the ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	o, on := PauseOf(cm.Data)
	keys := map[string]string{}
	for _, k := range pauseKeys {
		if v, ok := cm.Data[k]; ok {
			keys[k] = v
		}
	}
	return Seen{Order: o, On: on, version: cm.ResourceVersion, keys: keys}, nil
}

// LiftPause removes the pause s, as read by ReadPause, and returns what
// it removed (On false: there was no pause). It writes only if the pause
// is still s: one replaced meanwhile is left, and the error is a
// ChangedError; one lifted meanwhile is not lifted twice.
func LiftPause(ctx context.Context, c kubernetes.Interface, s Seen) (Seen, error) {
	patch := func(version string) error {
		_, err := c.CoreV1().ConfigMaps(Namespace).Patch(ctx, Name, types.MergePatchType,
			conditional(version, "data", pauseKeys), metav1.PatchOptions{})
		return err
	}
	reread := func() (Seen, error) { return ReadPause(ctx, c) }
	lifted, err := lift(s, patch, reread, "the cluster's pause", "kured-host resume")
	if err != nil && !errors.Is(err, ErrChanged) {
		return Seen{}, fmt.Errorf("the ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	return lifted, err
}

// Resume lifts the pause and returns the pause it lifted, if any. The
// ConfigMap stays, with its other keys.
func Resume(ctx context.Context, c kubernetes.Interface) (Order, bool, error) {
	s, err := ReadPause(ctx, c)
	if err != nil {
		return Order{}, false, fmt.Errorf("resume: %w", err)
	}
	lifted, err := LiftPause(ctx, c, s)
	if err != nil {
		return Order{}, false, fmt.Errorf("resume: %w", err)
	}
	return lifted.Order, lifted.On, nil
}

// ReadHold reads node's hold for LiftHold.
func ReadHold(ctx context.Context, c kubernetes.Interface, node string) (Seen, error) {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return Seen{}, fmt.Errorf("read node %s: %w", node, err)
	}
	return holdSeen(n), nil
}

func holdSeen(n *corev1.Node) Seen {
	o, on := HoldOf(n)
	keys := map[string]string{}
	if v, ok := n.Labels[HoldLabel]; ok {
		keys["label "+HoldLabel] = v
	}
	for _, k := range holdKeys {
		if v, ok := n.Annotations[k]; ok {
			keys["annotation "+k] = v
		}
	}
	return Seen{Order: o, On: on, version: n.ResourceVersion, keys: keys}
}

// LiftHold removes node's hold s, as read by ReadHold, and returns what
// it removed (On false: the node was not held), under the same rule as
// LiftPause.
func LiftHold(ctx context.Context, c kubernetes.Interface, node string, s Seen) (Seen, error) {
	patch := func(version string) error {
		p := map[string]any{"resourceVersion": version, "labels": map[string]any{HoldLabel: nil}, "annotations": nulls(holdKeys)}
		data, err := json.Marshal(map[string]any{"metadata": p})
		if err != nil {
			return err
		}
		_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	reread := func() (Seen, error) { return ReadHold(ctx, c, node) }
	lifted, err := lift(s, patch, reread, "node "+node+"'s hold", "kured-host unhold "+node)
	if err != nil && !errors.Is(err, ErrChanged) {
		return Seen{}, fmt.Errorf("node %s: %w", node, err)
	}
	return lifted, err
}

// Unhold lifts node's hold and reports whether it was held.
func Unhold(ctx context.Context, c kubernetes.Interface, node string) (bool, error) {
	s, err := ReadHold(ctx, c, node)
	if err != nil {
		return false, fmt.Errorf("unhold: %w", err)
	}
	lifted, err := LiftHold(ctx, c, node, s)
	if err != nil {
		return false, fmt.Errorf("unhold: %w", err)
	}
	return lifted.On, nil
}

// lift writes patch(version) until it is not refused for a conflict: the
// object changed. Then it reads the order again: the same order, the
// write is retried on the new version; another, it is a ChangedError;
// none, there is nothing left to lift. Nothing present, nothing is
// written. A NotFound from the write counts as a change (the object was
// deleted): the read after it says what is there.
func lift(s Seen, patch func(version string) error, reread func() (Seen, error), what, again string) (Seen, error) {
	read := s
	for range maxTries {
		if len(s.keys) == 0 {
			return s, nil
		}
		err := patch(s.version)
		switch {
		case err == nil:
			return s, nil
		case !apierrors.IsConflict(err) && !apierrors.IsNotFound(err):
			return Seen{}, fmt.Errorf("write: %w", err)
		}
		now, err := reread()
		if err != nil {
			return Seen{}, err
		}
		if !maps.Equal(now.keys, read.keys) {
			if !now.On {
				return Seen{}, nil // lifted by someone else, or set to "false"
			}
			return Seen{}, &ChangedError{What: what, Was: read, Now: now, Again: again}
		}
		s = now
	}
	return Seen{}, fmt.Errorf("the object kept changing while it was written (%d tries); try again", maxTries)
}

// conditional is a merge patch that removes keys from field, written
// only if the object's resourceVersion is still version.
func conditional(version, field string, keys []string) []byte {
	data, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": version},
		field:      nulls(keys),
	})
	return data
}

func nulls(keys []string) map[string]any {
	m := map[string]any{}
	for _, k := range keys {
		m[k] = nil
	}
	return m
}
