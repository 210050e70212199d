package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/packaging"
)

// ErrNoNodeRead means the node's identity may not read other Nodes, which
// the lock needs: Kubernetes 1.32 and later let a node read only its own.
var ErrNoNodeRead = errors.New("no read access to Nodes")

// CheckAccess asks the API server (SelfSubjectAccessReview) whether this
// identity may get, list and watch Nodes. If not, the error carries the
// manifest that grants it.
func CheckAccess(ctx context.Context, client kubernetes.Interface) error {
	missing, err := MissingAccess(ctx, client)
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this node may not %s Nodes. kured-host reads every node's claim; "+
		"since Kubernetes 1.32 a node may read only its own Node unless a role allows more. "+
		"Apply this once per cluster (kured-host rbac | kubectl apply -f -):\n\n%s",
		ErrNoNodeRead, strings.Join(missing, ", "), packaging.RBAC)
}

// MissingAccess returns which of get, list and watch on Nodes this
// identity may not do, asking the API server (SelfSubjectAccessReview).
func MissingAccess(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	var missing []string
	for _, verb := range []string{"get", "list", "watch"} {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "nodes"},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("check access to nodes (SelfSubjectAccessReview): %w", err)
		}
		if !r.Status.Allowed {
			missing = append(missing, verb)
		}
	}
	return missing, nil
}
