package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/packaging"
)

// FindKubeconfig finds the kubeconfig as `run` does (kube.Find), unless
// override (--kubeconfig, a path as given, not under the host root) is set.
func FindKubeconfig(ctx context.Context, root host.Root, configured, override string, units kube.ProcessLister) (kube.Kubeconfig, error) {
	if override != "" {
		return kube.GivenKubeconfig(override)
	}
	return kube.Find(ctx, root, configured, units)
}

// Kubeconfig reports the kubeconfig found (path, how) and the server it
// names, or why none could be used.
func Kubeconfig(path, how, server string, err error) Finding {
	const check = "kubeconfig"
	if err != nil {
		hint := ""
		if errors.Is(err, fs.ErrPermission) || strings.Contains(err.Error(), "permission denied") {
			hint = " (the service runs as root: run check as root too)"
		}
		return finding(Fail, check, "%v%s (identity, permissions and clock not checked)", err, hint)
	}
	return finding(OK, check, "%s (%s), server %s", path, how, server)
}

// Identifier tells who the credentials are.
type Identifier interface {
	WhoAmI(ctx context.Context) (user string, err error)
}

// Identity learns the user of the credentials (SelfSubjectReview) and
// the node the daemon acts as: system:node:<name>, or kubernetes.node_name
// (configured) if set ("" if neither). asked is false when the API server
// could not answer, which makes the other API checks pointless.
func Identity(ctx context.Context, id Identifier, configured string) (f Finding, node string, asked bool) {
	const check = "identity"
	user, err := id.WhoAmI(ctx)
	if err != nil {
		return finding(Fail, check, "who am I (SelfSubjectReview): %v", err), "", false
	}
	name, isNode := strings.CutPrefix(user, "system:node:")
	isNode = isNode && name != ""
	switch {
	case isNode && configured == "":
		return finding(OK, check, "%s: node %s", user, name), name, true
	case isNode && configured == name:
		return finding(OK, check, "%s: node %s, as kubernetes.node_name says", user, name), name, true
	case isNode:
		return finding(Fail, check, "%s, but kubernetes.node_name is %q: a node may write only its own Node; "+
			"remove kubernetes.node_name or use that node's kubeconfig", user, configured), configured, true
	case configured != "":
		return finding(Warn, check, "%s is not a node's identity (system:node:<name>); acting as node %s (kubernetes.node_name) "+
			"with whatever rights %s has: the kubelet's kubeconfig is what kured-host is made for", user, configured, user), configured, true
	}
	return finding(Fail, check, "%s is not a node's identity (system:node:<name>): use the kubelet's kubeconfig, or set kubernetes.node_name", user), "", true
}

// NodeReader reads a Node.
type NodeReader interface {
	Node(ctx context.Context, name string) (*corev1.Node, error)
}

// Node checks that the node exists, whether it is Ready, whether it
// shows this host's boot ID (bootID; "" when unknown), and which group
// limits apply to it: a node without a group's label is not limited by
// that group's rule.
func Node(ctx context.Context, r NodeReader, name, bootID string, groups []config.GroupLimit) Finding {
	const check = "node"
	n, err := r.Node(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		return finding(Fail, check, "there is no Node %s: has the kubelet registered it?", name)
	case err != nil:
		return finding(Fail, check, "read Node %s: %v", name, err)
	}
	level, ready := OK, "Ready"
	if !kube.Ready(n) {
		level, ready = Warn, "not Ready (the daemon waits for Ready after a reboot)"
	}
	var labels, missing []string
	for _, g := range groups {
		if v, ok := n.Labels[g.Label]; ok {
			labels = append(labels, fmt.Sprintf("%s=%s", g.Label, v))
		} else {
			missing = append(missing, fmt.Sprintf("%s (at most %d at once)", g.Label, g.Max))
		}
	}
	msg := fmt.Sprintf("%s is %s", name, ready)
	if got := n.Status.NodeInfo.BootID; bootID != "" && got != bootID {
		level = Warn
		msg += fmt.Sprintf("; the Node shows boot %.8s, this host is in boot %.8s: the kubelet has not reported this boot yet, or this host is not %s (after a reboot the daemon keeps the slot until they match)", got, bootID, name)
	}
	if len(labels) > 0 {
		msg += "; " + strings.Join(labels, ", ")
	}
	if len(missing) > 0 {
		level = Warn
		msg += "; no label " + strings.Join(missing, ", ") + ": that group rule does not limit this node"
	}
	return Finding{Level: level, Check: check, Message: msg}
}

// Access asks what the credentials may do (SelfSubjectAccessReview).
type Access interface {
	Allowed(ctx context.Context, attrs authorizationv1.ResourceAttributes) (allowed bool, reason string, err error)
	// OnePod returns one pod on the node, "" if there is none.
	OnePod(ctx context.Context, node string) (namespace, name string, err error)
}

// Need is a permission the daemon uses: Verbs on one kind of object.
type Need struct {
	Verbs []string
	Attrs authorizationv1.ResourceAttributes // without the verb
	// For says what the daemon does with it.
	For string
	// Manifest: kured-host's RBAC manifest is what grants it.
	Manifest bool
	// Without, if set, is how the daemon does without it: it is a
	// warning then, not a failure.
	Without string
}

// String reads as "get, list, watch nodes".
func (n Need) String() string {
	a := n.Attrs
	what := a.Resource
	if a.Subresource != "" {
		what += "/" + a.Subresource
	}
	switch {
	case a.Name != "" && a.Namespace != "":
		what += " " + a.Namespace + "/" + a.Name
	case a.Name != "":
		what += " " + a.Name
	case a.Namespace != "":
		what += " in " + a.Namespace
	}
	if a.FieldSelector != nil {
		for _, r := range a.FieldSelector.Requirements {
			what += fmt.Sprintf(" with %s=%s", r.Key, strings.Join(r.Values, ","))
		}
	}
	return strings.Join(n.Verbs, ", ") + " " + what
}

// Needs lists what the daemon running as node does in the cluster (the
// own-node ones only if node is known).
func Needs(node string) []Need {
	needs := []Need{{
		Verbs: []string{"get", "list", "watch"}, Attrs: authorizationv1.ResourceAttributes{Resource: "nodes"},
		For: "to read every node's claim", Manifest: true,
	}, {
		Verbs: []string{"get"}, Attrs: authorizationv1.ResourceAttributes{Resource: "configmaps", Namespace: steer.Namespace, Name: steer.Name},
		For: "to read an operator's pause (kured-host pause) and the cluster's settings", Manifest: true,
	}, {
		Verbs: []string{"list", "watch"}, Attrs: authorizationv1.ResourceAttributes{Resource: "configmaps", Namespace: steer.Namespace, Name: steer.Name},
		For: "to watch them", Manifest: true,
		Without: "it reads them at each look, once a minute while it waits",
	}}
	if node == "" {
		return needs
	}
	return append(needs,
		Need{Verbs: []string{"patch"}, Attrs: authorizationv1.ResourceAttributes{Resource: "nodes", Name: node},
			For: "to write its claim, cordon and uncordon"},
		Need{Verbs: []string{"list"}, Attrs: authorizationv1.ResourceAttributes{Resource: "pods", FieldSelector: onNode(node)},
			For: "to find the pods to drain and blocking pods"},
		Need{Verbs: []string{"create"}, Attrs: authorizationv1.ResourceAttributes{Resource: "pods", Subresource: "eviction"},
			For: "to drain"},
		Need{Verbs: []string{"create"}, Attrs: authorizationv1.ResourceAttributes{Resource: "events", Namespace: metav1.NamespaceDefault},
			For: "to report alarms and blocked reboots on its Node"},
	)
}

func onNode(node string) *authorizationv1.FieldSelectorAttributes {
	return &authorizationv1.FieldSelectorAttributes{Requirements: []metav1.FieldSelectorRequirement{
		{Key: "spec.nodeName", Operator: metav1.FieldSelectorOpIn, Values: []string{node}},
	}}
}

// Permissions asks about every Need, one finding each. Getting a pod by
// name, which the drain does while it waits for evicted pods to go, is
// granted pod by pod (the Node authorizer allows the pods bound to the
// node), so it is asked about one of the node's pods, if it has any.
func Permissions(ctx context.Context, a Access, node string) []Finding {
	var out []Finding
	canList := false
	for _, n := range Needs(node) {
		f := permission(ctx, a, n)
		out = append(out, f)
		if n.Attrs.Resource == "pods" && n.Verbs[0] == "list" {
			canList = f.Level == OK
		}
	}
	if !canList {
		return out
	}
	ns, pod, err := a.OnePod(ctx, node)
	switch {
	case err != nil:
		out = append(out, finding(Fail, "permissions", "list the pods on %s: %v", node, err))
	case pod != "":
		out = append(out, permission(ctx, a, Need{Verbs: []string{"get"},
			Attrs: authorizationv1.ResourceAttributes{Resource: "pods", Namespace: ns, Name: pod},
			For:   "to wait for evicted pods to go; asked about one of this node's pods"}))
	}
	return out
}

func permission(ctx context.Context, a Access, n Need) Finding {
	const check = "permissions"
	var missing, reasons []string
	for _, verb := range n.Verbs {
		attrs := n.Attrs
		attrs.Verb = verb
		ok, reason, err := a.Allowed(ctx, attrs)
		if err != nil {
			return finding(Fail, check, "cannot ask whether it may %s (SelfSubjectAccessReview): %v", Need{Verbs: []string{verb}, Attrs: n.Attrs}, err)
		}
		if !ok {
			missing = append(missing, verb)
			if reason != "" && !slices.Contains(reasons, reason) {
				reasons = append(reasons, reason)
			}
		}
	}
	if len(missing) == 0 {
		return finding(OK, check, "%s (%s)", n, n.For)
	}
	denied := Need{Verbs: missing, Attrs: n.Attrs}
	f := finding(Fail, check, "may not %s, which it needs %s", denied, n.For)
	if n.Without != "" {
		f = finding(Warn, check, "may not %s %s: %s", denied, n.For, n.Without)
	}
	if len(reasons) > 0 {
		f.Message += " (" + strings.Join(reasons, "; ") + ")"
	}
	if n.Manifest {
		if n.Attrs.Resource == "nodes" {
			f.Message += ". Since Kubernetes 1.32 a node may read only its own Node unless a role allows more"
		} else {
			f.Message += ". kured-host's RBAC manifest grants it (this version added it)"
		}
		f.Detail = "Apply this once per cluster (kured-host rbac | kubectl apply -f -):\n\n" + string(packaging.RBAC)
	}
	return f
}

// KubeAPI asks the API server with the node's credentials.
type KubeAPI struct {
	Client kubernetes.Interface
}

var (
	_ Identifier = KubeAPI{}
	_ NodeReader = KubeAPI{}
	_ Access     = KubeAPI{}
)

// WhoAmI creates a SelfSubjectReview.
func (k KubeAPI) WhoAmI(ctx context.Context) (string, error) {
	user, _, err := kube.WhoAmI(ctx, k.Client)
	return user, err
}

// Node gets the Node.
func (k KubeAPI) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return k.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// Allowed creates a SelfSubjectAccessReview.
func (k KubeAPI) Allowed(ctx context.Context, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
	r, err := k.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	reason := r.Status.Reason
	if r.Status.EvaluationError != "" && !r.Status.Allowed {
		reason = strings.TrimSpace(reason + " " + r.Status.EvaluationError)
	}
	return r.Status.Allowed, reason, nil
}

// OnePod lists the node's pods, as the drain does, and returns the first.
func (k KubeAPI) OnePod(ctx context.Context, node string) (string, string, error) {
	list, err := k.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, Limit: 1})
	if err != nil || len(list.Items) == 0 {
		return "", "", err
	}
	return list.Items[0].Namespace, list.Items[0].Name, nil
}
