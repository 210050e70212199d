// Package steer reads what an operator tells the fleet from kubectl: a
// pause of the whole cluster, in the ConfigMap kube-system/kured-host, and
// a hold on one node, a label on its Node. Both reach the cycle as
// blockers (a held node leaves the queue; a paused one keeps its place and
// does not announce), asked before a node joins the queue, now and then
// while it waits, before each announce and before its cordon. A node that
// needs no reboot asks nothing.
package steer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/block"
)

// The cluster-wide object, which `kured-host rbac` lets every node read,
// and its keys.
const (
	Namespace = "kube-system"
	Name      = "kured-host"
	// KeyPaused holds the reason of a pause. Present means paused,
	// unless it is "false"; an empty reason is still a pause.
	KeyPaused      = "paused"
	KeyPausedBy    = "paused-by"
	KeyPausedSince = "paused-since" // RFC 3339
	// KeySettings holds the cluster's settings: TOML in the schema of
	// the configuration file, limited to config.ClusterKeys.
	KeySettings = "config.toml"
)

// The hold of one node: the label holds it (its value is free: "true",
// "freeze", a ticket), the annotations say why, who and since when.
const (
	HoldLabel  = "kured-host.dev/hold"
	HoldReason = "kured-host.dev/hold-reason"
	HoldBy     = "kured-host.dev/hold-by"
	HoldSince  = "kured-host.dev/hold-since" // RFC 3339
)

// The blockers' kinds, in metrics and logs.
const (
	KindPaused = "paused"
	KindHeld   = "held"
)

const (
	noReasonGiven  = "no reason given"
	grantForReader = "`kured-host rbac | kubectl apply -f -` grants it (get, list and watch on that one ConfigMap for the group system:nodes)"
)

// Order is a pause or a hold: why, who and since when, as the object
// says. By and Since may be empty: kubectl writes only what it is told.
type Order struct {
	Reason string
	By     string
	Since  time.Time
	// Problem is what could not be read of it (a Since that is not a
	// time); the order stands all the same.
	Problem string
}

// String reads "since 2026-12-01 10:00 UTC by alice: kernel freeze".
func (o Order) String() string {
	var b strings.Builder
	if !o.Since.IsZero() {
		b.WriteString("since " + o.Since.UTC().Format("2006-01-02 15:04 MST") + " ")
	}
	if o.By != "" {
		b.WriteString("by " + o.By + " ")
	}
	s := strings.TrimSuffix(b.String(), " ")
	reason := o.Reason
	if reason == "" {
		reason = noReasonGiven
	}
	if s == "" {
		return reason
	}
	return s + ": " + reason
}

// PauseOf reads the pause from the object's data.
func PauseOf(data map[string]string) (Order, bool) {
	reason, ok := data[KeyPaused]
	if !ok || strings.EqualFold(strings.TrimSpace(reason), "false") {
		return Order{}, false
	}
	return order(reason, data[KeyPausedBy], data[KeyPausedSince], KeyPausedSince), true
}

// HoldOf reads the hold from a Node's labels and annotations.
func HoldOf(n metav1.Object) (Order, bool) {
	v, ok := n.GetLabels()[HoldLabel]
	if !ok {
		return Order{}, false
	}
	a := n.GetAnnotations()
	reason := a[HoldReason]
	if reason == "" && v != "true" {
		reason = v
	}
	return order(reason, a[HoldBy], a[HoldSince], HoldSince), true
}

func order(reason, by, since, sinceKey string) Order {
	o := Order{Reason: strings.TrimSpace(reason), By: by}
	if since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			o.Problem = fmt.Sprintf("%s %q is not an RFC 3339 time", sinceKey, since)
		} else {
			o.Since = t
		}
	}
	return o
}

// Reader reads the orders with the node's own credentials.
type Reader struct {
	Client kubernetes.Interface
	Node   string
	// Cached reads from the API server's watch cache (resourceVersion
	// "0"), which costs it no etcd read: for the looks a waiting node
	// takes now and then. The look right before an announce is fresh.
	Cached bool
	// Watch, when set and live, answers instead of a read.
	Watch *Watch
}

func (r Reader) get() metav1.GetOptions {
	if r.Cached {
		return metav1.GetOptions{ResourceVersion: "0"}
	}
	return metav1.GetOptions{}
}

// Pause reads the cluster's pause. No object means no pause. A read that
// is refused says which grant is missing.
func (r Reader) Pause(ctx context.Context) (Order, bool, error) {
	cm, err := r.configMap(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return Order{}, false, nil
	case apierrors.IsForbidden(err):
		return Order{}, false, fmt.Errorf("node %s may not read the ConfigMap %s/%s, where a pause is set: %s", r.Node, Namespace, Name, grantForReader)
	case err != nil:
		return Order{}, false, fmt.Errorf("read the ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	o, paused := PauseOf(cm.Data)
	return o, paused, nil
}

// Settings reads the cluster's settings ("" when there are none).
func (r Reader) Settings(ctx context.Context) (string, error) {
	cm, err := r.configMap(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("node %s may not read the ConfigMap %s/%s, where the cluster's settings are: %s", r.Node, Namespace, Name, grantForReader)
	case err != nil:
		return "", fmt.Errorf("read the ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	return cm.Data[KeySettings], nil
}

// Hold reads this node's hold from its Node.
func (r Reader) Hold(ctx context.Context) (Order, bool, error) {
	if m, ok := r.Watch.nodeMeta(); ok {
		o, held := HoldOf(m)
		return o, held, nil
	}
	n, err := r.Client.CoreV1().Nodes().Get(ctx, r.Node, r.get())
	if err != nil {
		return Order{}, false, fmt.Errorf("read node %s for a hold: %w", r.Node, err)
	}
	o, held := HoldOf(n)
	return o, held, nil
}

// configMap is the cluster's ConfigMap, from the watch if it is live,
// else read; a ConfigMap that is not there is a NotFound error either way.
func (r Reader) configMap(ctx context.Context) (*corev1.ConfigMap, error) {
	if cm, ok := r.Watch.configMap(); ok {
		if cm == nil {
			return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), Name)
		}
		return cm, nil
	}
	return r.Client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, r.get())
}

// Paused blocks while the cluster is paused. Its Kind, "paused", tells the
// cycle to keep the node's place in the queue.
type Paused struct{ Reader Reader }

var _ block.Blocker = Paused{}

// Kind implements block.Blocker.
func (Paused) Kind() string { return KindPaused }

// Check implements block.Blocker.
func (p Paused) Check(ctx context.Context) (string, error) {
	o, paused, err := p.Reader.Pause(ctx)
	if err != nil || !paused {
		return "", err
	}
	return "reboots are paused for the cluster: " + o.String() + " (kured-host resume)", nil
}

// Held blocks while this node is held.
type Held struct{ Reader Reader }

var _ block.Blocker = Held{}

// Kind implements block.Blocker.
func (Held) Kind() string { return KindHeld }

// Check implements block.Blocker.
func (h Held) Check(ctx context.Context) (string, error) {
	o, held, err := h.Reader.Hold(ctx)
	if err != nil || !held {
		return "", err
	}
	return heldMessage(o, h.Reader.Node), nil
}

func heldMessage(o Order, node string) string {
	return "this node is held: " + o.String() + " (kured-host unhold " + node + ")"
}

// HoldIn says, as Held does, whether the Node n is held by its own labels
// and annotations as read: the lock asks it of the Node its commit is
// conditional on (lock.Options.Held), so that a hold set before that
// read is always obeyed, and one set after it refuses the commit.
func HoldIn(n metav1.Object) error {
	o, held := HoldOf(n)
	if !held {
		return nil
	}
	return errors.New(heldMessage(o, n.GetName()))
}

// OnlyPaused reports whether the pause is all that blocks: the node then
// keeps its place in the queue.
func OnlyPaused(bs []block.Blocked) bool {
	for _, b := range bs {
		if b.Kind != KindPaused {
			return false
		}
	}
	return len(bs) > 0
}

// IsPaused reports whether the pause is among the blockers (a pause that
// could not be read counts: the node cannot tell it is not paused).
func IsPaused(bs []block.Blocked) bool {
	for _, b := range bs {
		if b.Kind == KindPaused {
			return true
		}
	}
	return false
}
