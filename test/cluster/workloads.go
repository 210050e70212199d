package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// Workloads put pods on hosts the way controllers would, without running
// the controllers: the owner objects exist and the pods point at them, but
// nothing recreates an evicted pod (the drain only needs them gone).

// PodKind is what owns a pod, which decides whether a drain evicts it.
type PodKind int

// The kinds of pods a drain meets.
const (
	Replicated PodKind = iota // owned by a ReplicaSet
	DaemonSet                 // owned by a DaemonSet: left alone
	Mirror                    // a static pod's mirror: left alone
	EmptyDir                  // replicated, with an emptyDir volume
	Bare                      // no controller
)

// EnsureNamespace creates ns if it does not exist.
func (cp *ControlPlane) EnsureNamespace(ctx context.Context, ns string) error {
	_, err := cp.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// ReplicaSet creates a ReplicaSet owner object with the given labels and
// replica count; ReplicaSetPod binds pods of it to hosts.
func (cp *ControlPlane) ReplicaSet(ctx context.Context, ns, name string, replicas int32, labels map[string]string) (*appsv1.ReplicaSet, error) {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec("")},
		},
	}
	return cp.Admin.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{})
}

// DaemonSetObject creates a DaemonSet owner object.
func (cp *ControlPlane) DaemonSetObject(ctx context.Context, ns, name string, labels map[string]string) (*appsv1.DaemonSet, error) {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec("")},
		},
	}
	return cp.Admin.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{})
}

// PDB creates a PodDisruptionBudget with minAvailable over the labels.
func (cp *ControlPlane) PDB(ctx context.Context, ns, name string, minAvailable int, labels map[string]string) (*policyv1.PodDisruptionBudget, error) {
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(int32(minAvailable))),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	return cp.Admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
}

// WaitPDB waits until the disruption controller has computed the budget
// for the current pods and it allows want disruptions.
func (cp *ControlPlane) WaitPDB(ctx context.Context, ns, name string, want int32) error {
	var last int32 = -1
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pdb, err := cp.Admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = pdb.Status.DisruptionsAllowed
		return pdb.Status.ObservedGeneration == pdb.Generation && last == want, nil
	})
	if err != nil {
		return fmt.Errorf("pdb %s/%s: disruptionsAllowed %d, want %d: %w", ns, name, last, want, err)
	}
	return nil
}

// Pod puts a pod of the given kind on host h. owner is the ReplicaSet or
// DaemonSet for Replicated, EmptyDir and DaemonSet pods.
func (cp *ControlPlane) Pod(ctx context.Context, h *SimHost, ns, name string, kind PodKind, owner metav1.Object, labels map[string]string) (*corev1.Pod, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       podSpec(h.Name),
	}
	ownedBy := func(kind string) {
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true),
		}}
	}
	switch kind {
	case Replicated:
		ownedBy("ReplicaSet")
	case EmptyDir:
		ownedBy("ReplicaSet")
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	case DaemonSet:
		ownedBy("DaemonSet")
	case Mirror:
		return cp.mirrorPod(ctx, h, p)
	case Bare:
	}
	return cp.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
}

// mirrorPod creates a static pod's mirror with the node's own credentials,
// as the kubelet does; NodeRestriction wants it owned by the Node.
func (cp *ControlPlane) mirrorPod(ctx context.Context, h *SimHost, p *corev1.Pod) (*corev1.Pod, error) {
	n, err := h.Client.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	p.Annotations = map[string]string{
		corev1.MirrorPodAnnotationKey: "mirror",
		"kubernetes.io/config.source": "file",
	}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID, Controller: ptr.To(true)}}
	return h.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// WaitRunning waits until the pod is Running (the kubelet stand-in saw it).
func (cp *ControlPlane) WaitRunning(ctx context.Context, ns, name string) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cp.Admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
}

func podSpec(node string) corev1.PodSpec {
	return corev1.PodSpec{
		NodeName:                      node,
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
	}
}

// Recreate plays the ReplicaSet controller for rs: when one of its pods
// starts terminating (evicted, deleted), a replacement is created on one of
// hosts that is Ready and schedulable (waiting for one if none is), so
// that PodDisruptionBudgets recover as in a cluster. It stops with ctx.
func (cp *ControlPlane) Recreate(ctx context.Context, rs *appsv1.ReplicaSet, hosts []*SimHost) {
	sel := metav1.FormatLabelSelector(rs.Spec.Selector)
	seen := map[string]bool{}
	var mu sync.Mutex
	next := 0
	replace := func(p *corev1.Pod) {
		for ctx.Err() == nil {
			mu.Lock()
			var target *SimHost
			for i := range hosts {
				h := hosts[(next+i)%len(hosts)]
				if h.Name == p.Spec.NodeName {
					continue
				}
				n, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
				if err == nil && NodeReady(n) && !n.Spec.Unschedulable {
					target, next = h, (next+i+1)%len(hosts)
					break
				}
			}
			mu.Unlock()
			if target != nil {
				np := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{GenerateName: rs.Name + "-", Namespace: rs.Namespace, Labels: p.Labels, OwnerReferences: p.OwnerReferences},
					Spec:       podSpec(target.Name),
				}
				np.Spec.Volumes, np.Spec.Containers = p.Spec.Volumes, p.Spec.Containers
				if _, err := cp.Admin.CoreV1().Pods(rs.Namespace).Create(ctx, np, metav1.CreateOptions{}); err == nil {
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	go func() {
		for ctx.Err() == nil {
			w, err := cp.Admin.CoreV1().Pods(rs.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || (p.DeletionTimestamp == nil && ev.Type != "DELETED") {
					continue
				}
				mu.Lock()
				dup := seen[string(p.UID)]
				seen[string(p.UID)] = true
				mu.Unlock()
				if !dup {
					go replace(p.DeepCopy())
				}
			}
		}
	}()
}
