package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/steer"
)

// Source reads snapshots from the API server.
type Source struct {
	Client kubernetes.Interface
	Local  Local
	// Now is the clock ages count from; nil is time.Now.
	Now func() time.Time
}

// Read lists every Node in one consistent List (served at etcd's current
// revision, not from a cache) and reports on it. When the credentials may
// not list Nodes, the error wraps kube.ErrNoNodeRead and says what to do.
func (s *Source) Read(ctx context.Context) (Report, error) {
	r, _, err := s.read(ctx)
	return r, err
}

func (s *Source) read(ctx context.Context) (Report, string, error) {
	list, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return Report{}, "", s.forbidden(ctx, err)
	case err != nil:
		return Report{}, "", fmt.Errorf("list nodes: %w", err)
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	r := Snapshot(list.Items, s.Local, now())
	s.readPause(ctx, &r)
	return r, list.ResourceVersion, nil
}

// readPause adds the cluster's pause. It is reported, not fatal, when it
// cannot be read: the queue is worth showing all the same.
func (s *Source) readPause(ctx context.Context, r *Report) {
	cm, err := s.Client.CoreV1().ConfigMaps(steer.Namespace).Get(ctx, steer.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case apierrors.IsForbidden(err):
		r.PauseError = fmt.Sprintf("cannot tell whether the cluster is paused: these credentials may not get the ConfigMap %s/%s (kured-host rbac grants it to the nodes)", steer.Namespace, steer.Name)
	case err != nil:
		r.PauseError = fmt.Sprintf("cannot tell whether the cluster is paused: %v", err)
	default:
		r.SetPause(cm.Data)
	}
}

// Watch calls show with a snapshot at once, then again after each
// interval or sooner when a Node changes, until ctx ends; it returns nil
// then.
func (s *Source) Watch(ctx context.Context, interval time.Duration, show func(Report) error) error {
	for {
		r, rv, err := s.read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if err := show(r); err != nil {
			return err
		}
		s.waitChange(ctx, rv, interval)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// minRefresh keeps a burst of Node changes from redrawing more than a
// few times a second.
const minRefresh = 250 * time.Millisecond

// waitChange returns after interval, or once a Node changes after
// resourceVersion rv (but not within minRefresh of the call), or when ctx
// ends. Without the right to watch Nodes only the interval counts.
func (s *Source) waitChange(ctx context.Context, rv string, interval time.Duration) {
	began := time.Now()
	timer := time.NewTimer(interval)
	defer timer.Stop()
	var events <-chan watch.Event
	if w, err := s.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err == nil {
		defer w.Stop()
		events = w.ResultChan()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		case ev, ok := <-events:
			switch {
			case !ok:
				events = nil // the watch ended: wait for the interval
				continue
			case ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted:
				continue
			}
		}
		break
	}
	rest := time.NewTimer(max(minRefresh-time.Since(began), 0))
	defer rest.Stop()
	select {
	case <-ctx.Done():
	case <-rest.C:
	}
}

func (s *Source) forbidden(ctx context.Context, cause error) error {
	user, groups := WhoAmI(ctx, s.Client)
	missing, err := kube.MissingAccess(ctx, s.Client)
	if err != nil || len(missing) == 0 {
		missing = []string{"list"}
	}
	return AccessError(user, groups, missing, cause)
}

// WhoAmI returns the user name and groups of the client's credentials
// (SelfSubjectReview), or "" when the API server does not say.
func WhoAmI(ctx context.Context, client kubernetes.Interface) (string, []string) {
	user, groups, _ := kube.WhoAmI(ctx, client)
	return user, groups
}

// AccessError says that user (in groups) may not do the missing verbs on
// Nodes, and what to do about it: a node's identity needs kured-host's
// role (`kured-host rbac`), anyone else a kubeconfig that may read Nodes.
// It wraps kube.ErrNoNodeRead.
func AccessError(user string, groups, missing []string, cause error) error {
	who := "these credentials"
	if user != "" {
		who = user
	}
	var advice string
	if strings.HasPrefix(user, "system:node:") || slices.Contains(groups, "system:nodes") {
		advice = "Since Kubernetes 1.32 a node may read only its own Node unless a role allows more,\n" +
			"and kured-host's daemons need the same grant. Apply it once per cluster:"
	} else {
		advice = "Use a kubeconfig that may get, list and watch Nodes (--kubeconfig, an admin's),\n" +
			"or run status on a node of a cluster that has kured-host's role:"
	}
	return fmt.Errorf("%w: %s may not %s Nodes, which status reads.\n%s\n\n  kured-host rbac | kubectl apply -f -\n\n(the API server said: %v)",
		kube.ErrNoNodeRead, who, strings.Join(missing, ", "), advice, cause)
}
