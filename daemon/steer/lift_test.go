package steer

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// versioned makes c keep resourceVersions as the API server does: each
// write gives the object a new one, and a merge patch that names one is
// refused with a Conflict unless it is the object's. between, if set,
// runs right before the n-th patch (from 1) is looked at, with a function
// that changes the object: another writer between the command's read
// and its write.
func versioned(t *testing.T, c *fake.Clientset, between func(n int, change func(edit func(metav1.Object)))) {
	t.Helper()
	rv := 100
	tr := c.Tracker()
	react := k8stesting.ObjectReaction(tr)
	patches := 0
	c.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		gvr, ns, name := p.GetResource(), p.GetNamespace(), p.GetName()
		bump := func(edit func(metav1.Object)) {
			obj, err := tr.Get(gvr, ns, name)
			if err != nil {
				t.Errorf("get %s %s: %v", gvr.Resource, name, err)
				return
			}
			m, _ := meta.Accessor(obj)
			if edit != nil {
				edit(m)
			}
			rv++
			m.SetResourceVersion(strconv.Itoa(rv))
			if err := tr.Update(gvr, obj, ns); err != nil {
				t.Errorf("update %s %s: %v", gvr.Resource, name, err)
			}
		}
		patches++
		if between != nil {
			between(patches, bump)
		}
		var want struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &want); err != nil {
			t.Errorf("patch %s: %v", p.GetPatch(), err)
		}
		cur, err := tr.Get(gvr, ns, name)
		if err != nil {
			return true, nil, err
		}
		m, _ := meta.Accessor(cur)
		if v := want.Metadata.ResourceVersion; v != "" && v != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), name, errors.New("the object has been modified"))
		}
		if _, _, err := react(a); err != nil {
			return true, nil, err
		}
		bump(nil)
		obj, err := tr.Get(gvr, ns, name)
		return true, obj, err
	})
}

const when = "2026-12-01T09:00:00Z"

func pauseCM(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Name, ResourceVersion: "1"}, Data: data}
}

// edits of another operator, between the read and the write.
func setData(kv ...string) func(metav1.Object) {
	return func(o metav1.Object) {
		cm := o.(*corev1.ConfigMap)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(cm.Data, kv[i])
			} else {
				cm.Data[kv[i]] = kv[i+1]
			}
		}
	}
}

func setLabels(kv ...string) func(metav1.Object) {
	return func(o metav1.Object) {
		l, a := o.GetLabels(), o.GetAnnotations()
		if l == nil {
			l = map[string]string{}
		}
		if a == nil {
			a = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			m := l
			k, ok := strings.CutPrefix(kv[i], "a:")
			if ok {
				m = a
			}
			if kv[i+1] == "" {
				delete(m, k)
			} else {
				m[k] = kv[i+1]
			}
		}
		o.SetLabels(l)
		o.SetAnnotations(a)
	}
}

func setStatus(o metav1.Object) {
	n := o.(*corev1.Node)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
}

// TestResumeLiftsWhatItRead: resume writes only if the pause it read is
// still there. Another pause set meanwhile is refused, shown escaped;
// anything else changed meanwhile is retried, a bounded number of times.
func TestResumeLiftsWhatItRead(t *testing.T) {
	a := map[string]string{KeyPaused: "incident 42", KeyPausedBy: "alice", KeyPausedSince: when, KeySettings: "[lock]\nconcurrency = 2\n"}
	tests := []struct {
		name    string
		cm      *corev1.ConfigMap
		between func(n int, change func(func(metav1.Object)))
		paused  bool   // lifted a pause
		err     string // in the error
		left    map[string]string
	}{
		{name: "no ConfigMap"},
		{name: "not paused", cm: pauseCM(map[string]string{KeySettings: "x"}), left: map[string]string{KeySettings: "x"}},
		{name: "nothing in between", cm: pauseCM(a), paused: true, left: map[string]string{KeySettings: a[KeySettings]}},
		{name: "the settings changed in between: retried", cm: pauseCM(a), paused: true,
			between: func(n int, change func(func(metav1.Object))) {
				if n == 1 {
					change(setData(KeySettings, "[lock]\nconcurrency = 3\n"))
				}
			},
			left: map[string]string{KeySettings: "[lock]\nconcurrency = 3\n"}},
		{name: "another pause in between: refused", cm: pauseCM(a),
			between: func(n int, change func(func(metav1.Object))) {
				if n == 1 {
					change(setData(KeyPaused, "incident 43\x1b[2J\r\u202e", KeyPausedBy, "bob"))
				}
			},
			err:  `the cluster's pause changed after it was read, so it was not lifted: it is now since 2026-12-01 09:00 UTC by bob: incident 43\x1b[2J\r\u202e (it was since 2026-12-01 09:00 UTC by alice: incident 42); run kured-host resume again`,
			left: map[string]string{KeyPaused: "incident 43\x1b[2J\r\u202e", KeyPausedBy: "bob", KeyPausedSince: when, KeySettings: a[KeySettings]}},
		{name: "the same reason, set again by another: refused", cm: pauseCM(a),
			between: func(n int, change func(func(metav1.Object))) {
				if n == 1 {
					change(setData(KeyPausedBy, "bob"))
				}
			},
			err:  "by bob: incident 42",
			left: map[string]string{KeyPaused: "incident 42", KeyPausedBy: "bob", KeyPausedSince: when, KeySettings: a[KeySettings]}},
		{name: "resumed by another in between", cm: pauseCM(a),
			between: func(n int, change func(func(metav1.Object))) {
				if n == 1 {
					change(setData(KeyPaused, "", KeyPausedBy, "", KeyPausedSince, ""))
				}
			},
			left: map[string]string{KeySettings: a[KeySettings]}},
		{name: "changed before every write: gives up", cm: pauseCM(a),
			between: func(_ int, change func(func(metav1.Object))) {
				change(setData("other", strconv.FormatInt(time.Now().UnixNano(), 10)))
			},
			err: "kept changing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.cm != nil {
				objs = append(objs, tt.cm.DeepCopy())
			}
			c := fake.NewClientset(objs...)
			versioned(t, c, tt.between)
			o, paused, err := Resume(context.Background(), c)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("resume: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("resume: %v, want an error with %q", err, tt.err)
			case err != nil && strings.ContainsAny(err.Error(), "\x1b\r\u202e"):
				t.Errorf("the error holds raw control characters: %q", err)
			}
			if strings.Contains(tt.err, "changed") && !errors.Is(err, ErrChanged) {
				t.Errorf("errors.Is(%v, ErrChanged) = false", err)
			}
			if paused != tt.paused || paused && o.Reason != "incident 42" {
				t.Errorf("resume lifted %v (paused %v), want paused %v", o, paused, tt.paused)
			}
			if tt.cm == nil || tt.left == nil {
				return
			}
			cm, err := c.CoreV1().ConfigMaps(Namespace).Get(context.Background(), Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !mapsEqual(cm.Data, tt.left) {
				t.Errorf("left %q, want %q", cm.Data, tt.left)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestUnholdLiftsWhatItRead: the same for a node's hold, where the
// node's kubelet and daemon write the Node every few seconds.
func TestUnholdLiftsWhatItRead(t *testing.T) {
	held := func() *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", ResourceVersion: "1",
			Labels:      map[string]string{HoldLabel: "true", "pool": "gpu"},
			Annotations: map[string]string{HoldReason: "driver freeze", HoldBy: "alice", HoldSince: when, "other": "x"}}}
	}
	once := func(edit func(metav1.Object)) func(int, func(func(metav1.Object))) {
		return func(n int, change func(func(metav1.Object))) {
			if n == 1 {
				change(edit)
			}
		}
	}
	tests := []struct {
		name        string
		node        *corev1.Node
		between     func(int, func(func(metav1.Object)))
		held        bool
		err         string
		labels      map[string]string
		annotations map[string]string
	}{
		{name: "not held", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", ResourceVersion: "1", Labels: map[string]string{"pool": "gpu"}}},
			labels: map[string]string{"pool": "gpu"}},
		{name: "nothing in between", node: held(), held: true, labels: map[string]string{"pool": "gpu"}, annotations: map[string]string{"other": "x"}},
		{name: "the kubelet wrote the status in between", node: held(), between: once(func(o metav1.Object) { setStatus(o) }), held: true,
			labels: map[string]string{"pool": "gpu"}, annotations: map[string]string{"other": "x"}},
		{name: "another label in between", node: held(), between: once(setLabels("kured-host.dev/claim", "waiting")), held: true,
			labels: map[string]string{"pool": "gpu", "kured-host.dev/claim": "waiting"}, annotations: map[string]string{"other": "x"}},
		{name: "held again with another reason in between: refused", node: held(),
			between:     once(setLabels("a:"+HoldReason, "firmware\u202e\x1b]0;x\x07", "a:"+HoldBy, "bob")),
			err:         `node gpu-1's hold changed after it was read, so it was not lifted: it is now since 2026-12-01 09:00 UTC by bob: firmware\u202e\x1b]0;x\x07 (it was since 2026-12-01 09:00 UTC by alice: driver freeze); run kured-host unhold gpu-1 again if you still mean to lift it`,
			labels:      map[string]string{HoldLabel: "true", "pool": "gpu"},
			annotations: map[string]string{HoldReason: "firmware\u202e\x1b]0;x\x07", HoldBy: "bob", HoldSince: when, "other": "x"}},
		{name: "unheld by another in between", node: held(),
			between: once(setLabels(HoldLabel, "", "a:"+HoldReason, "", "a:"+HoldBy, "", "a:"+HoldSince, "")),
			labels:  map[string]string{"pool": "gpu"}, annotations: map[string]string{"other": "x"}},
		{name: "a busy node: a status write before each of the first five writes", node: held(), held: true,
			between: func(n int, change func(func(metav1.Object))) {
				if n <= 5 {
					change(setStatus)
				}
			},
			labels: map[string]string{"pool": "gpu"}, annotations: map[string]string{"other": "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset(tt.node)
			versioned(t, c, tt.between)
			wasHeld, err := Unhold(context.Background(), c, "gpu-1")
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("unhold: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("unhold: %v\nwant an error with %q", err, tt.err)
			case err != nil && strings.ContainsAny(err.Error(), "\x1b\x07\u202e"):
				t.Errorf("the error holds raw control characters: %q", err)
			}
			if wasHeld != tt.held {
				t.Errorf("unhold says held %v, want %v", wasHeld, tt.held)
			}
			n, err := c.CoreV1().Nodes().Get(context.Background(), "gpu-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !mapsEqual(n.Labels, tt.labels) || !mapsEqual(n.Annotations, tt.annotations) {
				t.Errorf("left labels %q, annotations %q; want %q, %q", n.Labels, n.Annotations, tt.labels, tt.annotations)
			}
		})
	}
}

// TestLiftSeam: what was read is what is lifted, whenever the write
// comes (the cluster test drives this against a real API server).
func TestLiftSeam(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(pauseCM(map[string]string{KeyPaused: "A"}))
	versioned(t, c, nil)
	s, err := ReadPause(ctx, c)
	if err != nil || !s.On || s.Order.Reason != "A" {
		t.Fatalf("ReadPause: %+v, %v", s, err)
	}
	if err := Pause(ctx, c, Order{Reason: "B", By: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := LiftPause(ctx, c, s); !errors.Is(err, ErrChanged) {
		t.Fatalf("LiftPause of A after B: %v, want ErrChanged", err)
	}
	if s, err = ReadPause(ctx, c); err != nil || s.Order.Reason != "B" {
		t.Fatalf("after the refusal: %+v, %v; want B in force", s, err)
	}
	if lifted, err := LiftPause(ctx, c, s); err != nil || !lifted.On || lifted.Order.Reason != "B" {
		t.Fatalf("LiftPause of B: %+v, %v", lifted, err)
	}
}
