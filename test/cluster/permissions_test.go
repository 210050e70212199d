package cluster

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

type permCase struct {
	what    string
	allowed bool
	do      func(ctx context.Context) error
}

// TestNodePermissions checks that a host's identity, system:node:<name>,
// can do exactly what design/claims.md's table says, on a kube-apiserver
// with the Node authorizer, NodeRestriction and kured-host's RBAC
// manifest; and that without the manifest it cannot read other Nodes. A
// Kubernetes upgrade that changes these rules fails here first.
func TestNodePermissions(t *testing.T) {
	ctx := testCtx(t)
	me := newHost(t, ctx, HostOptions{})
	other := newHost(t, ctx, HostOptions{})
	ns := "perm-" + me.Name
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "perm"}
	rs, err := cp.ReplicaSet(ctx, ns, "perm", 5, labels)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(h *SimHost, name string) string {
		t.Helper()
		if _, err := cp.Pod(ctx, h, ns, name, Replicated, rs, labels); err != nil {
			t.Fatal(err)
		}
		if err := cp.WaitRunning(ctx, ns, name); err != nil {
			t.Fatal(err)
		}
		return name
	}
	mine, mineToEvict, mineToDelete := pod(me, "mine"), pod(me, "mine-evict"), pod(me, "mine-delete")
	theirs := pod(other, "theirs")
	if _, err := cp.DaemonSetObject(ctx, ns, "agent", map[string]string{"app": "agent"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c := me.Client
	nodes := c.CoreV1().Nodes()
	patch := func(node, body string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := nodes.Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		}
	}
	evict := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
		}
	}
	cases := []permCase{
		{"get its own Node", true, func(ctx context.Context) error { _, err := nodes.Get(ctx, me.Name, metav1.GetOptions{}); return err }},
		{"annotate its own Node", true, patch(me.Name, `{"metadata":{"annotations":{"kured-host.dev/claim":"{}"}}}`)},
		{"label its own Node (own prefix)", true, patch(me.Name, `{"metadata":{"labels":{"kured-host.dev/claim":"waiting"}}}`)},
		{"cordon its own Node", true, patch(me.Name, `{"spec":{"unschedulable":true}}`)},
		{"uncordon its own Node", true, patch(me.Name, `{"spec":{"unschedulable":null}}`)},
		{"remove its own claim", true, patch(me.Name, `{"metadata":{"labels":{"kured-host.dev/claim":null},"annotations":{"kured-host.dev/claim":null}}}`)},
		{"get another Node (RBAC manifest)", true, func(ctx context.Context) error { _, err := nodes.Get(ctx, other.Name, metav1.GetOptions{}); return err }},
		{"list Nodes (RBAC manifest)", true, func(ctx context.Context) error { _, err := nodes.List(ctx, metav1.ListOptions{}); return err }},
		{"watch Nodes (RBAC manifest)", true, watchNodes(me)},
		{"list its own pods", true, func(ctx context.Context) error {
			_, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + me.Name})
			return err
		}},
		{"get its own pod", true, func(ctx context.Context) error {
			_, err := c.CoreV1().Pods(ns).Get(ctx, mine, metav1.GetOptions{})
			return err
		}},
		{"evict its own pod", true, evict(mineToEvict)},
		{"delete its own pod", true, func(ctx context.Context) error {
			return c.CoreV1().Pods(ns).Delete(ctx, mineToDelete, metav1.DeleteOptions{})
		}},
		{"create an Event", true, func(ctx context.Context) error {
			_, err := c.CoreV1().Events("default").Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: me.Name + "."},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: me.Name, UID: types.UID(me.Name)},
				Reason:         "PermissionTest", Message: "test", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "kured-host", Host: me.Name},
			}, metav1.CreateOptions{})
			return err
		}},
		{"create a SelfSubjectReview", true, func(ctx context.Context) error {
			_, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			return err
		}},
		{"create a SelfSubjectAccessReview", true, func(ctx context.Context) error {
			_, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}},
			}, metav1.CreateOptions{})
			return err
		}},
		{"get its own node lease", true, func(ctx context.Context) error {
			_, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, me.Name, metav1.GetOptions{})
			return err
		}},

		{"patch another Node", false, patch(other.Name, `{"metadata":{"annotations":{"kured-host.dev/claim":"{}"}}}`)},
		{"taint its own Node", false, patch(me.Name, `{"spec":{"taints":[{"key":"kured-host.dev/rebooting","effect":"PreferNoSchedule"}]}}`)},
		{"set a node-restriction.kubernetes.io label", false, patch(me.Name, `{"metadata":{"labels":{"node-restriction.kubernetes.io/x":"y"}}}`)},
		{"set a node-role.kubernetes.io label", false, patch(me.Name, `{"metadata":{"labels":{"node-role.kubernetes.io/rebooting":""}}}`)},
		{"list all pods", false, func(ctx context.Context) error {
			_, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"get another node's pod", false, func(ctx context.Context) error {
			_, err := c.CoreV1().Pods(ns).Get(ctx, theirs, metav1.GetOptions{})
			return err
		}},
		{"evict another node's pod", false, evict(theirs)},
		{"delete another node's pod", false, func(ctx context.Context) error {
			return c.CoreV1().Pods(ns).Delete(ctx, theirs, metav1.DeleteOptions{})
		}},
		{"get a DaemonSet", false, func(ctx context.Context) error {
			_, err := c.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
			return err
		}},
		{"get a ConfigMap", false, func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
			return err
		}},
		{"get the ConfigMap kube-system/kured-host (RBAC manifest)", true, func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "kured-host", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil // allowed: there is no pause to read
			}
			return err
		}},
		{"get another ConfigMap in kube-system", false, func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
			return err
		}},
		{"list ConfigMaps in kube-system", false, func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list the ConfigMap kube-system/kured-host by name (RBAC manifest)", true, func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kured-host"})
			return err
		}},
		{"watch the ConfigMap kube-system/kured-host by name (RBAC manifest)", true, func(ctx context.Context) error {
			w, err := c.CoreV1().ConfigMaps("kube-system").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kured-host"})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"watch ConfigMaps in kube-system", false, func(ctx context.Context) error {
			w, err := c.CoreV1().ConfigMaps("kube-system").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"pause the cluster (write kube-system/kured-host)", false, func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "kured-host"}, Data: map[string]string{"paused": "by a node"},
			}, metav1.CreateOptions{})
			return err
		}},
		{"create a Lease elsewhere", false, func(ctx context.Context) error {
			_, err := c.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "kured-host"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(me.Name)},
			}, metav1.CreateOptions{})
			return err
		}},
		{"get another node's lease", false, func(ctx context.Context) error {
			_, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, other.Name, metav1.GetOptions{})
			return err
		}},
	}
	for _, pc := range cases {
		t.Run(pc.what, func(t *testing.T) { checkPermission(t, ctx, pc) })
	}

	// Without the manifest the Node authorizer alone refuses to let a node
	// read other Nodes (Kubernetes >= 1.32): take the binding away.
	t.Run("without the RBAC manifest", func(t *testing.T) {
		binding, err := cp.Admin.RbacV1().ClusterRoleBindings().Get(ctx, "kured-host-node-reader", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cp.Admin.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		defer restoreBinding(t, ctx, binding)
		getOther := func(ctx context.Context) error { _, err := nodes.Get(ctx, other.Name, metav1.GetOptions{}); return err }
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsForbidden(getOther(ctx)), nil
		}); err != nil {
			t.Fatalf("reading another Node is still allowed without the binding: %v", err)
		}
		for _, pc := range []permCase{
			{"list Nodes", false, func(ctx context.Context) error { _, err := nodes.List(ctx, metav1.ListOptions{}); return err }},
			{"watch Nodes", false, watchNodes(me)},
			{"get its own Node", true, func(ctx context.Context) error { _, err := nodes.Get(ctx, me.Name, metav1.GetOptions{}); return err }},
		} {
			t.Run(pc.what, func(t *testing.T) { checkPermission(t, ctx, pc) })
		}
	})
}

func watchNodes(h *SimHost) func(context.Context) error {
	return func(ctx context.Context) error {
		w, err := h.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		w.Stop()
		return nil
	}
}

func checkPermission(t *testing.T, ctx context.Context, pc permCase) {
	t.Helper()
	if pc.allowed {
		// The Node authorizer learns of new pods asynchronously: retry a
		// refusal for a while before calling it one.
		if err := authorizerLag(ctx, func() error { return pc.do(ctx) }); err != nil {
			t.Errorf("want allowed: %v", err)
		}
		return
	}
	err := pc.do(ctx)
	if !apierrors.IsForbidden(err) {
		t.Errorf("want 403 Forbidden, got %v", err)
	}
}

func restoreBinding(t *testing.T, ctx context.Context, b *rbacv1.ClusterRoleBinding) {
	t.Helper()
	b = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, RoleRef: b.RoleRef, Subjects: b.Subjects}
	if _, err := cp.Admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, cp.NodesCanListNodes); err != nil {
		t.Fatalf("binding restored but not in force: %v", err)
	}
}
