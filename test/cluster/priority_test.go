package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/steer"
)

// The API server names the FlowSchema and the priority level that served
// a request in these response headers, by UID.
const (
	headerFlowSchema    = "X-Kubernetes-Pf-Flowschema-Uid"
	headerPriorityLevel = "X-Kubernetes-Pf-Prioritylevel-Uid"
)

// served records, per request, the FlowSchema and priority level UIDs.
type served struct {
	mu   sync.Mutex
	last [2]string
	rt   http.RoundTripper
}

func (s *served) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	if resp != nil {
		s.mu.Lock()
		s.last = [2]string{resp.Header.Get(headerFlowSchema), resp.Header.Get(headerPriorityLevel)}
		s.mu.Unlock()
	}
	return resp, err
}

func (s *served) take() [2]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.last
	s.last = [2]string{}
	return l
}

// TestPriorityLevels: which of the API server's default FlowSchemas and
// priority levels (API Priority and Fairness) serve each kind of request
// kured-host makes with a node's credentials, next to the kubelet's own
// heartbeats (Node status, Lease); and that the FlowSchema docs/api-load.md
// gives operators moves kured-host's reads of other Nodes out of the
// heartbeats' level. docs/api-load.md's table is this test's.
func TestPriorityLevels(t *testing.T) {
	ctx := testCtx(t)
	me := newHost(t, ctx, HostOptions{})
	rec := &served{}
	cfg := rest.CopyConfig(me.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.rt = rt; return rec })
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	claimed := metav1.ListOptions{LabelSelector: claim.Label}
	ignore := func(err error) error {
		// A refusal or an absent object is served, and classified, too.
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil
		}
		return err
	}
	type request struct {
		who, what string
		do        func() error
	}
	requests := []request{
		{"kured-host", "list the claimed Nodes (metadata)", func() error { _, err := meta.Resource(nodes).List(ctx, claimed); return err }},
		{"kured-host", "watch the claimed Nodes (metadata)", func() error {
			w, err := meta.Resource(nodes).Watch(ctx, claimed)
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"kured-host", "get its own Node (confirm)", func() error { _, err := kube.CoreV1().Nodes().Get(ctx, me.Name, metav1.GetOptions{}); return err }},
		{"kured-host", "patch its own Node (claim, cordon, marks)", func() error {
			_, err := kube.CoreV1().Nodes().Patch(ctx, me.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"kured-host.dev/priority-test":"x"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"kured-host", "get the ConfigMap kube-system/kured-host (pause, settings)", func() error {
			_, err := kube.CoreV1().ConfigMaps(steer.Namespace).Get(ctx, steer.Name, metav1.GetOptions{})
			return ignore(err)
		}},
		{"kured-host", "watch the ConfigMap kube-system/kured-host by name (pause, settings)", func() error {
			w, err := kube.CoreV1().ConfigMaps(steer.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + steer.Name})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"kured-host", "list its pods (drain, pod blockers)", func() error {
			_, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + me.Name})
			return err
		}},
		{"kured-host", "create an eviction (drain)", func() error {
			return ignore(kube.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "no-such-pod", Namespace: "default"}}))
		}},
		{"kured-host", "create an Event", func() error {
			_, err := kube.CoreV1().Events("default").Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "priority-test-"},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: me.Name, UID: types.UID(me.Name)},
				Reason:         "PriorityTest", Message: "priority test", Type: "Normal", Source: corev1.EventSource{Component: "kured-host", Host: me.Name},
			}, metav1.CreateOptions{})
			return err
		}},
		{"kured-host", "create a SelfSubjectReview (identity)", func() error {
			_, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			return err
		}},
		{"kubelet", "patch its Node's status (heartbeat)", func() error {
			_, err := kube.CoreV1().Nodes().PatchStatus(ctx, me.Name, []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`))
			return err
		}},
		{"kubelet", "update its Lease (heartbeat)", func() error {
			l, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, me.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: me.Name},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(me.Name), LeaseDurationSeconds: ptr.To(int32(40))},
				}, metav1.CreateOptions{})
				return err
			}
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
	}
	names := func() map[string]string {
		n := map[string]string{}
		fs, err := cp.Admin.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs.Items {
			n[string(f.UID)] = f.Name
		}
		pls, err := cp.Admin.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pls.Items {
			n[string(p.UID)] = p.Name
		}
		return n
	}
	// table makes each request and says where it was served, as
	// "flowschema/prioritylevel".
	table := func(show bool) map[string]string {
		out := map[string]string{}
		byUID := names()
		var lines []string
		for _, r := range requests {
			if err := r.do(); err != nil {
				t.Fatalf("%s: %s: %v", r.who, r.what, err)
			}
			got := rec.take()
			out[r.what] = byUID[got[0]] + "/" + byUID[got[1]]
			lines = append(lines, fmt.Sprintf("| %s | %s | `%s` | `%s` |", r.who, r.what, byUID[got[0]], byUID[got[1]]))
		}
		if show {
			t.Logf("\n| who | request | FlowSchema | priority level |\n|---|---|---|---|\n%s", strings.Join(lines, "\n"))
		}
		return out
	}

	want := map[string]string{
		"list the claimed Nodes (metadata)":                                    "system-node-high/node-high",
		"watch the claimed Nodes (metadata)":                                   "system-node-high/node-high",
		"get its own Node (confirm)":                                           "system-node-high/node-high",
		"patch its own Node (claim, cordon, marks)":                            "system-node-high/node-high",
		"get the ConfigMap kube-system/kured-host (pause, settings)":           "system-nodes/system",
		"watch the ConfigMap kube-system/kured-host by name (pause, settings)": "system-nodes/system",
		"list its pods (drain, pod blockers)":                                  "system-nodes/system",
		"create an eviction (drain)":                                           "system-nodes/system",
		"create an Event":                                                      "system-nodes/system",
		"create a SelfSubjectReview (identity)":                                "system-nodes/system",
		"patch its Node's status (heartbeat)":                                  "system-node-high/node-high",
		"update its Lease (heartbeat)":                                         "system-node-high/node-high",
	}
	got := table(true)
	for what, w := range want {
		if got[what] != w {
			t.Errorf("%s: served by %s, want %s", what, got[what], w)
		}
	}

	// The operator's FlowSchema of docs/api-load.md: the nodes' lists
	// and watches of Nodes go to "system"; the heartbeats, and the
	// node's GET and PATCH of its own Node, stay in "node-high".
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "kured-host-node-reads"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "system"},
			MatchingPrecedence:         350,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: "system:nodes"}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"nodes"}, ClusterScope: true,
				}},
			}},
		},
	}
	if _, err := cp.Admin.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Admin.FlowcontrolV1().FlowSchemas().Delete(context.Background(), fs.Name, metav1.DeleteOptions{})
	})
	want["list the claimed Nodes (metadata)"] = "kured-host-node-reads/system"
	want["watch the claimed Nodes (metadata)"] = "kured-host-node-reads/system"
	// The API server takes the new FlowSchema up within a few seconds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = table(false)
		if got["list the claimed Nodes (metadata)"] == want["list the claimed Nodes (metadata)"] || time.Now().After(deadline) {
			table(true)
			break
		}
		time.Sleep(time.Second)
	}
	for what, w := range want {
		if got[what] != w {
			t.Errorf("with the FlowSchema of docs/api-load.md: %s: served by %s, want %s", what, got[what], w)
		}
	}
}
