package cluster

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestAuditLog makes known requests as a known user and finds each of
// them in the audit log once, with its verb, resource and user agent.
func TestAuditLog(t *testing.T) {
	ctx := testCtx(t)
	log, err := cp.AuditLog()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Requests(ctx); err != nil { // skip what came before
		t.Fatal(err)
	}
	certPEM, keyPEM, err := cp.CA.ClientCert("audit-tester", []string{"system:masters"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const agent = "audit-test/1"
	client, err := kubernetes.NewForConfig(&rest.Config{Host: cp.Server, QPS: -1, UserAgent: agent,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.ServerCA, CertData: certPEM, KeyData: keyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	cms := client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "audit-test"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(ctx, "audit-test", types.MergePatchType, []byte(`{"data":{"a":"b"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "audit-test", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	// A watch is counted when it starts, though it has not ended yet.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := client.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := cms.Delete(ctx, "audit-test", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	all, err := log.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mine := all.Where(func(r Request) bool { return r.UserAgent == agent })
	want := map[string]int{"create": 1, "patch": 1, "get": 1, "list": 1, "watch": 1, "delete": 1}
	if got := mine.Count(Verb); !maps.Equal(got, want) {
		t.Errorf("verbs %v, want %v", got, want)
	}
	for _, r := range mine {
		if r.User != "audit-tester" || !slices.Contains(r.Groups, "system:masters") {
			t.Errorf("%s %s: user %s %v, want audit-tester in system:masters", r.Verb, r.Resource, r.User, r.Groups)
		}
		wantRes := "configmaps"
		if r.Verb == "list" || r.Verb == "watch" {
			wantRes = "nodes"
		}
		if r.Resource != wantRes {
			t.Errorf("%s: resource %q, want %q", r.Verb, r.Resource, wantRes)
		}
		if r.Time.Before(began.Add(-time.Second)) || r.Time.After(time.Now()) {
			t.Errorf("%s %s: received at %s, outside the test", r.Verb, r.Resource, r.Time)
		}
		// The server's own time: none for the watch, counted when it
		// started; for the rest, more than nothing and no more than the
		// test has taken.
		switch {
		case r.Verb == "watch" && r.Took != 0:
			t.Errorf("watch: took %s, want none (still running)", r.Took)
		case r.Verb != "watch" && (r.Took <= 0 || r.Took > time.Since(began)):
			t.Errorf("%s %s: took %s, want between 0 and %s", r.Verb, r.Resource, r.Took, time.Since(began))
		}
	}
	if got := mine.Reads(); got != 3 {
		t.Errorf("reads %d, want 3", got)
	}
	if n, _ := mine.PeakPerSecond(); n < 1 || n > 6 {
		t.Errorf("peak per second %d, want 1 to 6", n)
	}
	if n := len(mine.Between(began.Add(-time.Second), time.Now())); n != 6 {
		t.Errorf("%d requests in the test's window, want 6", n)
	}

	// The watch ending does not count it again.
	w.Stop()
	stop()
	time.Sleep(200 * time.Millisecond)
	again, err := log.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(again.Where(func(r Request) bool { return r.UserAgent == agent })); n != 0 {
		t.Errorf("%d more requests after the watch ended, want 0", n)
	}
}
