package drain

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

func pod(name string, mutate ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": name}}}
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)}}
	p.Status.Phase = corev1.PodRunning
	for _, m := range mutate {
		m(&p)
	}
	return p
}

func owned(kind string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: "x", Controller: ptr.To(true)}}
	}
}

func bare(p *corev1.Pod) { p.OwnerReferences = nil }

func emptyDir(p *corev1.Pod) {
	p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
}

func TestPlan(t *testing.T) {
	all := []corev1.Pod{
		pod("web"),
		pod("agent", owned("DaemonSet")),
		pod("static", bare, func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }),
		pod("job", owned("Job"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("cache", emptyDir),
		pod("lonely", bare),
		pod("db", owned("StatefulSet")),
	}
	tests := []struct {
		name    string
		o       Options
		evict   []string
		skipped []string
		refused []string
	}{
		{"defaults: evict everything that can go", Options{DeleteEmptyDirData: true, EvictUnreplicated: true},
			[]string{"web", "cache", "lonely", "db"}, []string{"agent", "static", "job"}, nil},
		{"emptyDir and bare pods refused", Options{},
			nil, []string{"agent", "static", "job"}, []string{"ns/cache uses emptyDir", "ns/lonely has no controller"}},
		{"pod selector", Options{DeleteEmptyDirData: true, EvictUnreplicated: true, PodSelector: labels.SelectorFromSet(labels.Set{"app": "db"})},
			[]string{"db"}, []string{"web", "agent", "static", "job", "cache", "lonely"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evict, skipped, err := Plan(all, tt.o)
			var names, sk []string
			for _, p := range evict {
				names = append(names, p.Name)
			}
			for _, s := range skipped {
				sk = append(sk, strings.TrimPrefix(s.Pod, "ns/"))
			}
			if !slices.Equal(names, tt.evict) || !slices.Equal(sk, tt.skipped) {
				t.Errorf("evict %v skipped %v, want %v and %v", names, sk, tt.evict, tt.skipped)
			}
			if len(tt.refused) == 0 && err != nil {
				t.Errorf("unexpected error %v", err)
			}
			for _, r := range tt.refused {
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), r) {
					t.Errorf("error %v does not say %q", err, r)
				}
			}
		})
	}
}
