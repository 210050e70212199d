package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// kubelet is the stand-in for the VM's kubelet (the same job as the
// cluster harness's, test/cluster/kubelet.go, which is tied to simulated
// hosts).
type kubelet struct {
	client kubernetes.Interface
	node   string
	boot   string
	log    *slog.Logger
	// finishing are the pods being finished, by UID.
	finishing map[types.UID]bool
}

func runKubelet(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("kubelet", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "/etc/kubernetes/kubelet.conf", "the node's kubeconfig")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "kured-host-vm-kubelet"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	node, err := os.Hostname()
	if err != nil {
		return err
	}
	boot, err := bootID()
	if err != nil {
		return err
	}
	k := &kubelet{client: client, node: node, boot: boot, log: log.With("node", node), finishing: map[types.UID]bool{}}
	if err := retry(ctx, k.register); err != nil {
		return err
	}
	k.log.Info("node registered and Ready", "boot_id", boot)
	k.loop(ctx)
	// Stopped by systemd: the machine is going down (graceful node
	// shutdown reports the node NotReady first).
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.setReady(sctx, false, "KubeletNotReady", "node is shutting down"); err != nil {
		return fmt.Errorf("report NotReady: %w", err)
	}
	k.log.Info("node reported NotReady: shutting down", "boot_id", boot)
	return nil
}

// retry calls f every second until it succeeds or ctx ends (the API
// server may not be reachable yet, or the Node authorizer may not know
// the node yet).
func retry(ctx context.Context, f func(context.Context) error) error {
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// register creates the Node if it does not exist, and reports it Ready
// with this boot's ID.
func (k *kubelet) register(ctx context.Context) error {
	nodes := k.client.CoreV1().Nodes()
	_, err := nodes.Get(ctx, k.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node, Labels: map[string]string{
			"kubernetes.io/hostname": k.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	return k.setReady(ctx, true, "KubeletReady", "kubelet is posting ready status")
}

// setReady patches the Node's status as the kubelet does: the Ready
// condition, the capacity and the boot ID.
func (k *kubelet) setReady(ctx context.Context, ready bool, reason, message string) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("1Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"conditions": []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason, Message: message,
			LastHeartbeatTime: now, LastTransitionTime: now}},
		"capacity":    capacity,
		"allocatable": capacity,
		"nodeInfo": map[string]any{
			"bootID": k.boot, "kubeletVersion": "v1.37.2", "operatingSystem": "linux", "architecture": "amd64",
		},
	}})
	if err != nil {
		return err
	}
	_, err = k.client.CoreV1().Nodes().Patch(ctx, k.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// loop renews the lease every 10 seconds and looks after the node's pods
// every half second, until ctx ends.
func (k *kubelet) loop(ctx context.Context) {
	pods := time.NewTicker(500 * time.Millisecond)
	defer pods.Stop()
	var renewed time.Time
	for {
		if time.Since(renewed) >= 10*time.Second {
			if err := k.renewLease(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("renew lease", "err", err)
			} else {
				renewed = time.Now()
			}
		}
		if err := k.syncPods(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("sync pods", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-pods.C:
		}
	}
}

func (k *kubelet) renewLease(ctx context.Context) error {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.node, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// syncPods moves new pods bound to the node to Running and finishes the
// ones being deleted (grace period 0, as the kubelet once the containers
// have stopped).
func (k *kubelet) syncPods(ctx context.Context) error {
	list, err := k.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + k.node})
	if err != nil {
		return err
	}
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case p.DeletionTimestamp != nil && !k.finishing[p.UID]:
			err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0),
				Preconditions:      &metav1.Preconditions{UID: &p.UID},
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("finish pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			k.finishing[p.UID] = true
			k.log.Info("pod stopped", "pod", p.Namespace+"/"+p.Name)
		case p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodRunning:
			if err := k.start(ctx, p); err != nil {
				return fmt.Errorf("start pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			k.log.Info("pod running", "pod", p.Namespace+"/"+p.Name)
		}
	}
	return nil
}

func (k *kubelet) start(ctx context.Context, p *corev1.Pod) error {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	p.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	_, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
