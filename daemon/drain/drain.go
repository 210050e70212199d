// Package drain cordons this node and evicts its pods with the node's own
// credentials. It chooses the pods itself, without the DaemonSet GET that
// k8s.io/kubectl/pkg/drain's default filters make (a node may not read
// DaemonSets), and lets that library evict, retry while a
// PodDisruptionBudget refuses, and wait for the pods to go.
package drain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"
	kubedrain "k8s.io/kubectl/pkg/drain"

	"github.com/kured-host/kured-host/daemon/claim"
)

// Options are the drain settings (config section [drain]).
type Options struct {
	// GracePeriod below zero means each pod's own.
	GracePeriod              time.Duration
	Timeout                  time.Duration // 0: wait forever
	PodSelector              labels.Selector
	SkipWaitForDeleteTimeout time.Duration
	DeleteEmptyDirData       bool
	EvictUnreplicated        bool
	// RetryDelay is the pause between evictions a budget refused (5 s).
	RetryDelay time.Duration
}

// Drainer drains one node.
type Drainer struct {
	// Client must not retry refused evictions by itself: see
	// EvictionClient.
	Client kubernetes.Interface
	Node   string
	Options
	Log *slog.Logger
	// Observe, if set, is given the Node as each cordon or uncordon left
	// it: the lock's next claim write builds on it (lock.Lock.Observe).
	Observe func(*corev1.Node)
	// Confirm, if set, is asked before each eviction, the drain library's
	// retries included: an eviction is a disruptive step, and the slot
	// must still be this node's (a consistent read of its claim). An
	// error stops the drain. Evictions asked for together share one
	// Confirm that began after each of them asked (shared).
	Confirm func(ctx context.Context) error
}

// ErrRefused means pods the configuration does not allow evicting are on
// the node; nothing was evicted.
var ErrRefused = errors.New("cannot drain")

// Cordon marks the node unschedulable, with CordonAnnotation. The cycle
// cordons in the claim's write that records the cordon (lock.Lock.Cordon);
// this is for a claim that records a cordon kured-host had not made yet
// (one written by an earlier version, which cordoned after the record).
// It does not read the Node first: an admin's cordon in between gains
// only the annotation, and the node is uncordoned afterwards either way,
// as the claim says.
func (d *Drainer) Cordon(ctx context.Context) error { return d.setUnschedulable(ctx, true) }

// Uncordon marks the node schedulable.
func (d *Drainer) Uncordon(ctx context.Context) error { return d.setUnschedulable(ctx, false) }

// CordonAnnotation marks a cordon that kured-host made (claim.CordonAnnotation).
const CordonAnnotation = claim.CordonAnnotation

func (d *Drainer) setUnschedulable(ctx context.Context, on bool) error {
	patch := map[string]any{}
	claim.SetCordon(patch, on)
	body, _ := json.Marshal(patch) // maps of strings, bools and nils: cannot fail
	n, err := d.Client.CoreV1().Nodes().Patch(ctx, d.Node, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "kured-host"})
	if err != nil {
		verb := "uncordon"
		if on {
			verb = "cordon"
		}
		return fmt.Errorf("%s node %s: %w", verb, d.Node, err)
	}
	if d.Observe != nil {
		d.Observe(n)
	}
	return nil
}

// Skipped is a pod the drain leaves alone, and why.
type Skipped struct {
	Pod    string
	Reason string
}

// Plan sorts the node's pods into those to evict and those left alone;
// pods the configuration forbids evicting make an ErrRefused error that
// names them all.
func Plan(pods []corev1.Pod, o Options) (evict []corev1.Pod, skipped []Skipped, err error) {
	var refused []string
	for _, p := range pods {
		name := p.Namespace + "/" + p.Name
		ctrl := metav1.GetControllerOf(&p)
		switch {
		case o.PodSelector != nil && !o.PodSelector.Matches(labels.Set(p.Labels)):
			skipped = append(skipped, Skipped{name, "not selected by drain.pod_selector"})
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			skipped = append(skipped, Skipped{name, "finished"})
		case p.Annotations[corev1.MirrorPodAnnotationKey] != "":
			skipped = append(skipped, Skipped{name, "static pod (the kubelet runs it)"})
		case ctrl != nil && ctrl.Kind == "DaemonSet":
			skipped = append(skipped, Skipped{name, "DaemonSet pod"})
		case usesEmptyDir(p) && !o.DeleteEmptyDirData:
			refused = append(refused, name+" uses emptyDir (its data would be lost; set drain.delete_emptydir_data = true)")
		case ctrl == nil && !o.EvictUnreplicated:
			refused = append(refused, name+" has no controller to recreate it (set drain.evict_unreplicated = true)")
		default:
			evict = append(evict, p)
		}
	}
	if len(refused) > 0 {
		return nil, skipped, fmt.Errorf("%w: %s", ErrRefused, strings.Join(refused, "; "))
	}
	return evict, skipped, nil
}

func usesEmptyDir(p corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}

// Drain evicts the node's pods (those Plan chooses), retrying evictions a
// PodDisruptionBudget refuses, and waits until they are gone or the
// timeout passes.
func (d *Drainer) Drain(ctx context.Context) error {
	list, err := d.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + d.Node})
	if err != nil {
		return fmt.Errorf("drain node %s: list its pods: %w", d.Node, err)
	}
	evict, skipped, err := Plan(list.Items, d.Options)
	for _, s := range skipped {
		d.Log.Debug("leaving pod alone", "pod", s.Pod, "reason", s.Reason)
	}
	if err != nil {
		return fmt.Errorf("drain node %s: %w", d.Node, err)
	}
	if len(evict) == 0 {
		return nil
	}
	d.Log.Info("evicting pods", "count", len(evict))
	grace := -1
	if d.GracePeriod >= 0 {
		grace = int(d.GracePeriod / time.Second)
	}
	retry := d.RetryDelay
	if retry <= 0 {
		retry = 5 * time.Second
	}
	client := d.Client
	if d.Confirm != nil {
		client = confirmed{Interface: client, confirm: (&shared{confirm: d.Confirm}).do}
	}
	// The library's own time-out is checked only between its retries, a
	// RetryDelay apart: this one ends the drain on time, and cancels what
	// the library still has under way (it evicts nothing more once it
	// sees the cancellation).
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := &kubedrain.Helper{
		Ctx:                             hctx,
		Client:                          client,
		Force:                           true, // Plan decided
		GracePeriodSeconds:              grace,
		IgnoreAllDaemonSets:             true,
		DeleteEmptyDirData:              true,
		Timeout:                         d.Timeout,
		SkipWaitForDeleteTimeoutSeconds: int(d.SkipWaitForDeleteTimeout / time.Second),
		EvictErrorRetryDelay:            retry,
		Out:                             logWriter{d.Log, slog.LevelDebug},
		ErrOut:                          logWriter{d.Log, slog.LevelInfo},
		OnPodDeletionOrEvictionFinished: func(p *corev1.Pod, _ bool, err error) {
			if err != nil {
				d.Log.Warn("pod not evicted", "pod", p.Namespace+"/"+p.Name, "err", err)
				return
			}
			d.Log.Info("pod evicted", "pod", p.Namespace+"/"+p.Name)
		},
	}
	done := make(chan error, 1)
	go func() { done <- h.DeleteOrEvictPods(evict) }()
	var deadline <-chan time.Time
	if d.Timeout > 0 {
		t := time.NewTimer(d.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("drain node %s: %w", d.Node, err)
		}
		return nil
	case <-deadline:
		return fmt.Errorf("drain node %s: not done after drain.timeout (%s)", d.Node, d.Timeout)
	case <-ctx.Done():
		return fmt.Errorf("drain node %s: %w", d.Node, context.Cause(ctx))
	}
}

// confirmed is the client the drain library evicts with when each eviction
// is confirmed first. The library retries refused evictions on its own,
// for as long as the drain may take: a slot lost meanwhile (the Node
// deleted, the claim removed) must stop it before the next eviction.
type confirmed struct {
	kubernetes.Interface
	confirm func(context.Context) error
}

func (c confirmed) PolicyV1() policyv1client.PolicyV1Interface {
	return confirmedPolicy{c.Interface.PolicyV1(), c.confirm}
}

type confirmedPolicy struct {
	policyv1client.PolicyV1Interface
	confirm func(context.Context) error
}

func (p confirmedPolicy) Evictions(namespace string) policyv1client.EvictionInterface {
	return confirmedEvictions{p.PolicyV1Interface.Evictions(namespace), p.confirm}
}

type confirmedEvictions struct {
	policyv1client.EvictionInterface
	confirm func(context.Context) error
}

func (e confirmedEvictions) Evict(ctx context.Context, ev *policyv1.Eviction) error {
	if err := e.confirm(ctx); err != nil {
		return fmt.Errorf("before evicting pod %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	return e.EvictionInterface.Evict(ctx, ev)
}

// logWriter turns the drain library's progress lines into log records.
type logWriter struct {
	log   *slog.Logger
	level slog.Level
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		if line != "" {
			w.log.Log(context.Background(), w.level, line, "component", "drain")
		}
	}
	return len(p), nil
}

var _ io.Writer = logWriter{}

// EvictionClient returns the client for the drain, adjusted for a node's
// credentials in two ways:
//
//   - An eviction that a PodDisruptionBudget refuses comes back as 429 with
//     a Retry-After header, which client-go would obey by itself, silently,
//     up to ten times (about 100 s per call, past the drain timeout). The
//     header is dropped from eviction replies, so that the drain library
//     retries on its own schedule, within its timeout.
//   - Once an evicted pod is deleted, the Node authorizer forgets that it
//     was bound to this node and refuses the node's GET with 403 ("no
//     relationship found") rather than 404, which the drain library, waiting
//     for the pod to go, would take for a failure. Such a refusal of a GET
//     of a single pod is answered as 404: for this node the pod is gone.
func EvictionClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return nodeDrainTransport{rt} })
	return kubernetes.NewForConfig(cfg)
}

type nodeDrainTransport struct{ rt http.RoundTripper }

func (t nodeDrainTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && strings.HasSuffix(r.URL.Path, "/eviction"):
		resp.Header.Del("Retry-After")
	case resp.StatusCode == http.StatusForbidden && r.Method == http.MethodGet && isPodPath(r.URL.Path):
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if rerr == nil && bytes.Contains(body, []byte("no relationship found")) {
			gone := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,` +
				`"message":"the pod is no longer bound to this node"}`
			resp.StatusCode, resp.Status = http.StatusNotFound, "404 Not Found"
			resp.Header.Set("Content-Type", "application/json")
			body = []byte(gone)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Del("Content-Length")
	}
	return resp, nil
}

// isPodPath matches /api/v1/namespaces/NS/pods/NAME (no subresource).
func isPodPath(p string) bool {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	return len(parts) == 6 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces" && parts[4] == "pods"
}
