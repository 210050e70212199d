package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

// ByName narrows a list or watch to the one object called name: RBAC
// lets a grant limited to resourceNames list and watch with this field
// selector.
func ByName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }
}

// ByLabels narrows a list or watch to the objects selector selects.
func ByLabels(selector string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) { o.LabelSelector = selector }
}

// Narrowed is the ListWatch of an informer whose every List and watch
// narrow narrows.
func Narrowed(narrow func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			narrow(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			narrow(&o)
			return watchFn(ctx, o)
		},
	}
}

// NodeListWatch lists and watches the Nodes narrow selects, and the
// object their informer holds: their metadata when md is set, else whole
// Nodes.
func NodeListWatch(c kubernetes.Interface, md metadata.Interface, narrow func(*metav1.ListOptions)) (*cache.ListWatch, runtime.Object) {
	if md != nil {
		nodes := md.Resource(corev1.SchemeGroupVersion.WithResource("nodes"))
		return Narrowed(narrow, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, o)
		}, nodes.Watch), &metav1.PartialObjectMetadata{}
	}
	nodes := c.CoreV1().Nodes()
	return Narrowed(narrow, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return nodes.List(ctx, o)
	}, nodes.Watch), &corev1.Node{}
}
