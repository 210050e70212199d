package cluster

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kured-host/kured-host/daemon/kube"
)

// TestReadyWatch: the wait after a reboot watches the Node, with the
// node's own credentials, and learns from the watch: its first event is
// the Node as it is, the kubelet's reports (NotReady, Ready again) each
// end a wait long before its end, and the whole wait costs one request.
// A Node that shows another boot is not Ready in this one, whatever its
// condition says; a Node that is not there is not read yet, not a hang.
func TestReadyWatch(t *testing.T) {
	ctx := testCtx(t)
	me := newHost(t, ctx, HostOptions{})
	cfg := rest.CopyConfig(me.Config)
	counter := &requestCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &kube.ReadyWatch{Client: client, Node: me.Name, Boot: func() (string, error) { return me.BootID(), nil }}
	defer w.Stop()
	waitFor(t, ctx, "the node Ready in its boot", func() bool {
		ready, _, err := w.Next(ctx, time.Second)
		return err == nil && ready
	})
	if got := counter.nodes.Load(); got != 1 {
		t.Errorf("%d requests for the first read; want 1 (a watch)", got)
	}

	const long = time.Minute // a wait that ends before this ended on the report
	for _, want := range []bool{false, true} {
		if err := me.SetReady(ctx, want); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		for {
			ready, why, err := w.Next(ctx, long)
			if err != nil {
				t.Fatal(err)
			}
			if ready == want {
				if !want && !strings.Contains(why, "not Ready") {
					t.Errorf("why = %q, want it to say the node is not Ready", why)
				}
				break
			}
		}
		if took := time.Since(began); took >= long {
			t.Errorf("the kubelet's report (Ready=%v) reached the wait after %s: not from the watch", want, took)
		}
	}
	if got := counter.nodes.Load(); got != 1 {
		t.Errorf("%d requests for the whole wait; want 1, the watch tells", got)
	}

	// An API server that cannot be reached: the first call fails at
	// once, and the next waits its time before it reads again, rather
	// than asking in a loop.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := rest.CopyConfig(me.Config)
	down.Host = "https://" + l.Addr().String()
	_ = l.Close()
	downClient, err := kubernetes.NewForConfig(down)
	if err != nil {
		t.Fatal(err)
	}
	unreachable := &kube.ReadyWatch{Client: downClient, Node: me.Name, Boot: func() (string, error) { return me.BootID(), nil }}
	if _, _, err := unreachable.Next(ctx, 0); err == nil {
		t.Fatal("a read from an API server that is not there succeeded")
	}
	const pause = 300 * time.Millisecond
	began := time.Now()
	if _, _, err := unreachable.Next(ctx, pause); err == nil {
		t.Fatal("a read from an API server that is not there succeeded")
	}
	if took := time.Since(began); took < pause {
		t.Errorf("the read after a failed one came %s later; want at least %s", took, pause)
	}

	other := &kube.ReadyWatch{Client: client, Node: me.Name, Boot: func() (string, error) { return "another-boot", nil }}
	defer other.Stop()
	if ready, why, err := other.Next(ctx, 0); err != nil || ready || !strings.Contains(why, "has not reported this boot") {
		t.Errorf("a Node that shows another boot: ready=%v why=%q err=%v; want not Ready, the boot named", ready, why, err)
	}

	gone := &kube.ReadyWatch{Client: client, Node: "no-such-node", Boot: func() (string, error) { return me.BootID(), nil }}
	defer gone.Stop()
	if ready, why, err := gone.Next(ctx, 0); err != nil || ready || !strings.Contains(why, "not been read") {
		t.Errorf("a Node that is not there: ready=%v why=%q err=%v; want not Ready, not read yet", ready, why, err)
	}
}
