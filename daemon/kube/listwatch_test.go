package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestStreams: a watch counts as open from its start until it is stopped
// (the reflector stops every watch it stops reading, one the server ended
// included); its events pass through; a watch stopped after its
// successor opened leaves that one counted, and a second Stop counts once
// (Ended is called once for each stream).
func TestStreams(t *testing.T) {
	var servers []*watch.FakeWatcher
	lw := &cache.ListWatch{WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		w := watch.NewFakeWithChanSize(1, false)
		servers = append(servers, w)
		return w, nil
	}}
	var s Streams
	ended := 0
	s.Ended = func() { ended++ }
	s.Track(lw)
	if s.Open() {
		t.Fatal("open before any watch")
	}
	first, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Open() {
		t.Fatal("not open once a watch started")
	}
	servers[0].Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	if ev := <-first.ResultChan(); ev.Type != watch.Added || ev.Object.(*corev1.Node).Name != "n1" {
		t.Errorf("relayed %v, want the ADDED n1", ev)
	}
	second, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Stop() // the server ends the first stream after the second opened
	if _, ok := <-first.ResultChan(); ok {
		t.Fatal("the first stream still delivers after the server closed it")
	}
	first.Stop() // the reflector, done reading it
	first.Stop()
	if ended != 1 {
		t.Errorf("Ended called %d times for one stream stopped twice, want 1", ended)
	}
	if !s.Open() {
		t.Error("not open though the second stream is")
	}
	second.Stop()
	if s.Open() {
		t.Error("open after every watch was stopped")
	}
	if ended != 2 {
		t.Errorf("Ended called %d times for two streams, want 2", ended)
	}
}
