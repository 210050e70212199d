package block

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Pods blocks while a pod on this node that has not finished matches any
// of the selectors (kured's --blocking-pod-selector). It lists only this
// node's pods, which is what a node may list.
type Pods struct {
	Client    kubernetes.Interface
	Node      string
	Selectors []labels.Selector
}

var _ Blocker = (*Pods)(nil)

// Kind implements Blocker.
func (p *Pods) Kind() string { return "pods" }

// Check implements Blocker.
func (p *Pods) Check(ctx context.Context) (string, error) {
	var found []string
	for _, sel := range p.Selectors {
		list, err := p.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
			LabelSelector: sel.String(),
			FieldSelector: "spec.nodeName=" + p.Node + ",status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown",
		})
		if err != nil {
			return "", fmt.Errorf("list pods on %s matching %q: %w", p.Node, sel, err)
		}
		for _, pod := range list.Items {
			found = append(found, fmt.Sprintf("%s/%s (%s)", pod.Namespace, pod.Name, sel))
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	return "blocking pods on this node: " + strings.Join(found, ", "), nil
}
