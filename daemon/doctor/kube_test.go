package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
)

type fakeIdentity struct {
	user string
	err  error
}

func (f fakeIdentity) WhoAmI(context.Context) (string, error) { return f.user, f.err }

func TestIdentity(t *testing.T) {
	tests := []struct {
		name       string
		id         fakeIdentity
		configured string
		level      Level
		node       string
		asked      bool
		in         string
	}{
		{"a node", fakeIdentity{user: "system:node:n1"}, "", OK, "n1", true, "system:node:n1: node n1"},
		{"a node, named alike", fakeIdentity{user: "system:node:n1"}, "n1", OK, "n1", true, "as kubernetes.node_name says"},
		{"a node, named otherwise", fakeIdentity{user: "system:node:n1"}, "n2", Fail, "n2", true, `kubernetes.node_name is "n2"`},
		{"not a node, named", fakeIdentity{user: "admin"}, "n1", Warn, "n1", true, "acting as node n1"},
		{"not a node", fakeIdentity{user: "admin"}, "", Fail, "", true, "admin is not a node's identity"},
		{"empty node name", fakeIdentity{user: "system:node:"}, "", Fail, "", true, "is not a node's identity"},
		{"refused", fakeIdentity{err: apierrors.NewUnauthorized("certificate expired")}, "", Fail, "", false, "who am I (SelfSubjectReview): certificate expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, node, asked := Identity(context.Background(), tt.id, tt.configured)
			if f.Level != tt.level || node != tt.node || asked != tt.asked || !strings.Contains(f.Message, tt.in) {
				t.Errorf("got %s, node %q, asked %v; want level %s, node %q, asked %v, %q", f, node, asked, tt.level, tt.node, tt.asked, tt.in)
			}
		})
	}
}

type fakeNodes map[string]*corev1.Node

func (f fakeNodes) Node(_ context.Context, name string) (*corev1.Node, error) {
	if n, ok := f[name]; ok {
		return n, nil
	}
	if name == "broken" {
		return nil, errors.New("connection reset")
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
}

func node(name string, ready corev1.ConditionStatus, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}},
			NodeInfo:   corev1.NodeSystemInfo{BootID: "b00t1d00-0000-4000-8000-000000000001"},
		},
	}
}

func TestNode(t *testing.T) {
	nodes := fakeNodes{
		"zoned":   node("zoned", corev1.ConditionTrue, map[string]string{config.ZoneLabel: "a"}),
		"unzoned": node("unzoned", corev1.ConditionTrue, nil),
		"down":    node("down", corev1.ConditionFalse, map[string]string{config.ZoneLabel: "a"}),
	}
	zone := []config.GroupLimit{{Label: config.ZoneLabel, Max: 1}}
	const boot = "b00t1d00-0000-4000-8000-000000000001"
	tests := []struct {
		name   string
		node   string
		boot   string
		groups []config.GroupLimit
		level  Level
		in     string
	}{
		{"ready, in a zone", "zoned", boot, zone, OK, "zoned is Ready; topology.kubernetes.io/zone=a"},
		{"no group rule", "unzoned", boot, nil, OK, "unzoned is Ready"},
		{"boot unknown", "unzoned", "", nil, OK, "unzoned is Ready"},
		{"another boot", "zoned", "0dd0b007-0000-4000-8000-000000000002", zone, Warn, "the Node shows boot b00t1d00, this host is in boot 0dd0b007: the kubelet has not reported this boot yet, or this host is not zoned"},
		{"without the zone label", "unzoned", boot, zone, Warn, "no label topology.kubernetes.io/zone (at most 1 at once): that group rule does not limit this node"},
		{"not ready", "down", boot, zone, Warn, "not Ready"},
		{"missing", "ghost", boot, zone, Fail, "there is no Node ghost"},
		{"error", "broken", boot, zone, Fail, "connection reset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Node(context.Background(), nodes, tt.node, tt.boot, tt.groups)
			if f.Level != tt.level || !strings.Contains(f.Message, tt.in) {
				t.Errorf("got %s; want level %s and %q", f, tt.level, tt.in)
			}
		})
	}
}

// fakeAccess allows everything except deny (keyed by Need.String of one
// verb); err fails every review.
type fakeAccess struct {
	deny   map[string]string
	err    error
	pod    [2]string
	asked  []string
	podErr error
}

func (f *fakeAccess) Allowed(_ context.Context, a authorizationv1.ResourceAttributes) (bool, string, error) {
	key := Need{Verbs: []string{a.Verb}, Attrs: a}.String()
	f.asked = append(f.asked, key)
	if f.err != nil {
		return false, "", f.err
	}
	reason, denied := f.deny[key]
	return !denied, reason, nil
}

func (f *fakeAccess) OnePod(context.Context, string) (string, string, error) {
	return f.pod[0], f.pod[1], f.podErr
}

func TestPermissions(t *testing.T) {
	all := []string{
		"get nodes", "list nodes", "watch nodes", "get configmaps kube-system/kured-host",
		"list configmaps kube-system/kured-host", "watch configmaps kube-system/kured-host", "patch nodes n1", "list pods with spec.nodeName=n1",
		"create pods/eviction", "create events in default",
	}
	tests := []struct {
		name     string
		access   fakeAccess
		node     string
		asked    []string
		levels   []Level
		in       string // in the first failure or warning, or the last finding
		manifest bool
	}{
		{"all allowed, no pod", fakeAccess{}, "n1", all, []Level{OK, OK, OK, OK, OK, OK, OK}, "create events in default (to report alarms", false},
		{"all allowed, with a pod", fakeAccess{pod: [2]string{"web", "web-0"}}, "n1", append(all, "get pods web/web-0"),
			[]Level{OK, OK, OK, OK, OK, OK, OK, OK}, "get pods web/web-0 (to wait for evicted pods to go", false},
		{"node unknown: only the cluster's", fakeAccess{}, "", all[:6], []Level{OK, OK, OK}, "list, watch configmaps kube-system/kured-host (to watch them)", false},
		{"no grant for the pause", fakeAccess{deny: map[string]string{"get configmaps kube-system/kured-host": ""}}, "n1", all, []Level{OK, Fail, OK, OK, OK, OK, OK},
			"may not get configmaps kube-system/kured-host, which it needs to read an operator's pause", true},
		{"an RBAC manifest from before the watch", fakeAccess{deny: map[string]string{"list configmaps kube-system/kured-host": "", "watch configmaps kube-system/kured-host": ""}},
			"n1", all, []Level{OK, OK, Warn, OK, OK, OK, OK},
			"may not list, watch configmaps kube-system/kured-host to watch them: it reads them at each look, once a minute while it waits. kured-host's RBAC manifest grants it (this version added it)", true},
		{"no RBAC manifest", fakeAccess{deny: map[string]string{"get nodes": "node 'n1' cannot read all nodes, only its own Node object", "list nodes": "", "watch nodes": ""}, pod: [2]string{"web", "web-0"}},
			"n1", append(all, "get pods web/web-0"), []Level{Fail, OK, OK, OK, OK, OK, OK, OK},
			"may not get, list, watch nodes, which it needs to read every node's claim (node 'n1' cannot read all nodes, only its own Node object). Since Kubernetes 1.32", true},
		{"no pod list, so no pod get", fakeAccess{deny: map[string]string{"list pods with spec.nodeName=n1": ""}, pod: [2]string{"web", "web-0"}}, "n1", all,
			[]Level{OK, OK, OK, OK, Fail, OK, OK}, "may not list pods with spec.nodeName=n1, which it needs to find the pods to drain and blocking pods", false},
		{"no eviction", fakeAccess{deny: map[string]string{"create pods/eviction": ""}}, "n1", all, []Level{OK, OK, OK, OK, OK, Fail, OK},
			"may not create pods/eviction, which it needs to drain", false},
		{"pod list fails", fakeAccess{podErr: errors.New("timeout")}, "n1", all, []Level{OK, OK, OK, OK, OK, OK, OK, Fail}, "list the pods on n1: timeout", false},
		{"reviews fail", fakeAccess{err: errors.New("connection refused")}, "n1", []string{"get nodes", "get configmaps kube-system/kured-host", "list configmaps kube-system/kured-host", "patch nodes n1", "list pods with spec.nodeName=n1", "create pods/eviction", "create events in default"},
			[]Level{Fail, Fail, Fail, Fail, Fail, Fail, Fail}, "cannot ask whether it may get nodes (SelfSubjectAccessReview): connection refused", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := Permissions(context.Background(), &tt.access, tt.node)
			var levels []Level
			var first *Finding
			for i, f := range fs {
				levels = append(levels, f.Level)
				if f.Check != "permissions" {
					t.Errorf("check %q", f.Check)
				}
				if f.Level != OK && first == nil {
					first = &fs[i]
				}
			}
			if first == nil {
				first = &fs[len(fs)-1]
			}
			if !slices.Equal(levels, tt.levels) || !slices.Equal(tt.access.asked, tt.asked) {
				t.Errorf("levels %v, asked %q; want %v, %q", levels, tt.access.asked, tt.levels, tt.asked)
			}
			if !strings.Contains(first.Message, tt.in) {
				t.Errorf("got %s, want %q in it", first, tt.in)
			}
			if has := strings.Contains(first.Detail, "kind: ClusterRoleBinding"); has != tt.manifest {
				t.Errorf("manifest shown: %v, want %v", has, tt.manifest)
			}
		})
	}
}

func TestKubeconfig(t *testing.T) {
	root := t.TempDir()
	kc := filepath.Join(root, "etc/kubernetes/kubelet.conf")
	if err := os.MkdirAll(filepath.Dir(kc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "admin.conf")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name               string
		root               string
		configured, given  string
		path, how, errPart string
	}{
		{"known path under the root", root, "", "", kc, "known path", ""},
		{"configured", root, "/etc/kubernetes/kubelet.conf", "", kc, "configured (kubernetes.kubeconfig)", ""},
		{"--kubeconfig wins, not under the root", root, "/etc/kubernetes/kubelet.conf", other, other, "given with --kubeconfig", ""},
		{"--kubeconfig missing", root, "", other + ".nope", "", "", "--kubeconfig: stat"},
		{"none", t.TempDir(), "", "", "", "", "no kubelet kubeconfig found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc, err := FindKubeconfig(context.Background(), host.Root(tt.root), tt.configured, tt.given, nil)
			path, how := kc.Path, kc.How
			if path != tt.path || how != tt.how || (err == nil) != (tt.errPart == "") || (err != nil && !strings.Contains(err.Error(), tt.errPart)) {
				t.Errorf("got %q, %q, %v; want %q, %q, %q", path, how, err, tt.path, tt.how, tt.errPart)
			}
			f := Kubeconfig(path, how, "https://api:6443", err)
			if want := map[bool]Level{true: OK, false: Fail}[err == nil]; f.Level != want {
				t.Errorf("finding %s, want %s", f, want)
			}
		})
	}
	if f := Kubeconfig("", "", "", errors.New("open /etc/kubernetes/kubelet.conf: permission denied")); !strings.Contains(f.Message, "run check as root") {
		t.Errorf("no hint to run as root: %s", f)
	}
}

type settingsText struct {
	text string
	err  error
}

func (s settingsText) Settings(context.Context) (string, error) { return s.text, s.err }

// TestSettings: the cluster's settings as check reports them, validated
// under this host's files.
func TestSettings(t *testing.T) {
	reload := func(text string) error {
		_, err := config.CheckCluster(text)
		return err
	}
	tests := []struct {
		name   string
		r      settingsText
		level  Level
		in, at string // in the message; in the detail
	}{
		{"none", settingsText{}, OK, "no cluster settings", ""},
		{"valid", settingsText{text: "[lock]\nconcurrency = 2\n"}, OK, "are valid under this host's files", ""},
		{"bad", settingsText{text: "[lock]\nconcurrency = 0\n"}, Fail, "not valid; the nodes keep what they had", config.ClusterSource + ":2: lock.concurrency"},
		{"unreadable", settingsText{err: errors.New("forbidden")}, Fail, "cannot read the cluster's settings: forbidden", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Settings(context.Background(), tt.r, reload)
			if f.Level != tt.level || !strings.Contains(f.Message, tt.in) || !strings.Contains(f.Detail, tt.at) {
				t.Errorf("got %s (detail %q); want %s with %q and %q", f, f.Detail, tt.level, tt.in, tt.at)
			}
		})
	}
}
