package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// kubelet is the stand-in for a host's kubelet. It uses the node's own
// credentials for everything, as the real one does: it registers the Node,
// reports Ready and the boot ID, renews the node lease, moves the pods
// bound to the node to Running and finishes the ones being deleted.
type kubelet struct{ h *SimHost }

// authorizerLag retries a call that fails because the Node authorizer has
// not yet learnt of a new object ("no relationship found"), or on a
// conflict.
func authorizerLag(ctx context.Context, f func() error) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		err := f()
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsForbidden(err), apierrors.IsConflict(err), apierrors.IsNotFound(err):
			return false, nil
		}
		return false, err
	})
}

// register creates the Node if it does not exist and reports it Ready with
// the current boot ID.
func (k *kubelet) register(ctx context.Context) error {
	nodes := k.h.Client.CoreV1().Nodes()
	_, err := nodes.Get(ctx, k.h.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		labels := map[string]string{
			"kubernetes.io/hostname": k.h.Name,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
		}
		for key, v := range k.h.opts.Labels {
			labels[key] = v
		}
		_, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.h.Name, Labels: labels}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	return k.setReady(ctx, true, "KubeletReady", "kubelet is posting ready status")
}

// setReady sets the Ready condition and the boot ID in the Node's status,
// with a strategic merge patch of the status as the kubelet sends it (an
// update of the whole object could carry stale taints, which a node may
// not change).
func (k *kubelet) setReady(ctx context.Context, ready bool, reason, message string) error {
	nodes := k.h.Client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, k.h.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"conditions":  []corev1.NodeCondition{cond},
		"capacity":    capacity,
		"allocatable": capacity,
		"nodeInfo": map[string]any{
			"bootID": k.h.BootID(), "kubeletVersion": "v1.37.2", "operatingSystem": "linux", "architecture": "amd64",
		},
	}})
	if err != nil {
		return err
	}
	return k.h.recordHeartbeat(ctx, "status", func(ctx context.Context) error {
		_, err := nodes.Patch(ctx, k.h.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
}

// run keeps the lease fresh and looks after the node's pods until ctx ends.
func (k *kubelet) run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(k.h.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + k.h.Name }))
	inf := factory.Core().V1().Pods().Informer()
	handle := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			k.pod(ctx, p)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	// Every 10 s, from a moment of its own after the first: kubelets
	// started at different times renew at different moments, and stand-ins
	// started together renewed in the same second, so that a second of a
	// roll between two such bursts saw no heartbeat at all.
	const every = 10 * time.Second
	next := rand.N(every)
	var lease *coordinationv1.Lease
	renew := func(ctx context.Context) (err error) {
		lease, err = k.renewLease(ctx, lease)
		return err
	}
	for {
		if err := k.h.recordHeartbeat(ctx, "lease", renew); err != nil && ctx.Err() == nil {
			k.h.cp.logf("host %s: lease: %v", k.h.Name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		next = every
	}
}

// renewLease renews the node's Lease from last, the one the previous
// renewal wrote, as the kubelet's lease controller does: one Update a
// renewal, and a Get first only at the start or after a failed Update
// (a conflict: someone else wrote it). It returns the Lease written.
func (k *kubelet) renewLease(ctx context.Context, last *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := k.h.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	if last != nil {
		l := last.DeepCopy()
		l.Spec.RenewTime = &now
		l, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			return l, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, err
		}
	}
	l, err := leases.Get(ctx, k.h.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.h.Name, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.h.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.RenewTime = &now
		l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, err // the next renewal reads it afresh
	}
	return l, nil
}

// pod moves a new pod to Running, and finishes one being deleted.
func (k *kubelet) pod(ctx context.Context, p *corev1.Pod) {
	switch {
	case p.DeletionTimestamp != nil:
		go k.finish(ctx, p)
	case p.Status.Phase == "" || p.Status.Phase == corev1.PodPending:
		go func() {
			if err := authorizerLag(ctx, func() error { return k.start(ctx, p) }); err != nil && ctx.Err() == nil {
				k.h.cp.logf("host %s: start pod %s/%s: %v", k.h.Name, p.Namespace, p.Name, err)
			}
		}()
	}
}

func (k *kubelet) start(ctx context.Context, p *corev1.Pod) error {
	cur, err := k.h.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.UID != p.UID || cur.DeletionTimestamp != nil || cur.Status.Phase == corev1.PodRunning {
		return nil
	}
	now := metav1.Now()
	cur.Status.Phase = corev1.PodRunning
	cur.Status.StartTime = &now
	cur.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	cur.Status.ContainerStatuses = nil
	for _, c := range cur.Spec.Containers {
		cur.Status.ContainerStatuses = append(cur.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	_, err = k.h.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}

// finish deletes a terminating pod with grace period 0, as the kubelet
// does once the containers have stopped.
func (k *kubelet) finish(ctx context.Context, p *corev1.Pod) {
	if d := k.h.opts.PodStopDelay; d > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
	err := authorizerLag(ctx, func() error {
		err := k.h.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // already gone, or a new pod of the same name
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		k.h.cp.logf("host %s: finish pod %s/%s: %v", k.h.Name, p.Namespace, p.Name, err)
	}
}
