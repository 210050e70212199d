package cluster

import (
	"context"
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// NotReadyTaint is what the node lifecycle controller puts on a Node whose
// Ready condition is not True.
const NotReadyTaint = "node.kubernetes.io/not-ready"

// startNodeLifecycle plays the part of the node lifecycle controller that
// matters here: it taints a Node that is not Ready and removes the taint
// once it is Ready again. A node may not change its own taints
// (NodeRestriction), so this runs with the admin's rights, as the real
// controller does.
func (cp *ControlPlane) startNodeLifecycle() {
	factory := informers.NewSharedInformerFactory(cp.Admin, 0)
	inf := factory.Core().V1().Nodes().Informer()
	sync := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		ready := NodeReady(n)
		has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == NotReadyTaint })
		if ready == has {
			cp.setNotReadyTaint(n, !ready)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    sync,
		UpdateFunc: func(_, obj any) { sync(obj) },
	})
	factory.Start(cp.ctx.Done())
	cp.goRun(func(ctx context.Context) {
		<-ctx.Done()
		factory.Shutdown()
	})
}

func (cp *ControlPlane) setNotReadyTaint(n *corev1.Node, on bool) {
	taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == NotReadyTaint })
	if on {
		taints = append(taints, corev1.Taint{Key: NotReadyTaint, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: metav1.Now().Time}})
	}
	// A JSON merge patch replaces the whole list; the resourceVersion makes
	// it conditional so that a concurrent change is not overwritten.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
	if err != nil {
		return
	}
	_, err = cp.Admin.CoreV1().Nodes().Patch(cp.ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		cp.logf("node lifecycle: taint %s: %v", n.Name, err)
	}
}

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
