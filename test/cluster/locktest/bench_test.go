package locktest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/test/cluster"
)

// counter counts the requests a client sends.
type counter struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

func countingClient(h *cluster.SimHost, n *atomic.Int64) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(h.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counter{rt, n} })
	return kubernetes.NewForConfig(cfg)
}

// BenchmarkHandoff rolls N nodes through the lock at concurrency 2 (each
// node: 100 ms of "drain", a 150 ms reboot) and reports the hand-off
// latency (a release seen by the auditor to the next commit it sees) and
// the lock's API requests per acquisition. One roll per size:
//
//	go test -run '^$' -bench Handoff -benchtime 1x ./locktest/
func BenchmarkHandoff(b *testing.B) {
	for _, n := range []int{20, 50} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				p50, p99, perAcq := roll(b, n, 2)
				b.ReportMetric(float64(p50.Microseconds())/1000, "handoff-p50-ms")
				b.ReportMetric(float64(p99.Microseconds())/1000, "handoff-p99-ms")
				b.ReportMetric(perAcq, "requests/acquisition")
			}
		})
	}
}

var rollSeq atomic.Int64

func roll(b *testing.B, nodes, k int) (p50, p99 time.Duration, perAcq float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Stop()
	run := rollSeq.Add(1)
	var requests atomic.Int64
	var hosts []*cluster.SimHost
	names := map[string]bool{}
	for i := range nodes {
		h, err := cp.AddHost(ctx, cluster.HostOptions{Name: fmt.Sprintf("bench%d-%03d", run, i), DownTime: 150 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		defer cp.RemoveHost(context.Background(), h)
		client, err := countingClient(h, &requests)
		if err != nil {
			b.Fatal(err)
		}
		d := &driver{h: h, client: client, limits: claim.Limits{Concurrency: k}, hold: 100 * time.Millisecond, log: slog.New(slog.DiscardHandler)}
		h.AddService("kured-host", d.run)
		hosts = append(hosts, h)
		names[h.Name] = true
	}
	a.Scope = func(n string) bool { return names[n] }
	time.Sleep(200 * time.Millisecond) // informers started and idle
	startRequests := requests.Load()
	for _, h := range hosts {
		if err := h.SetRebootRequired(true); err != nil {
			b.Fatal(err)
		}
	}
	waitAll(b, ctx, hosts)
	if err := a.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	if err := a.Check(claim.Limits{Concurrency: k}); err != nil {
		b.Fatal(err)
	}
	acq := a.Acquisitions()
	var releases []time.Time
	for _, x := range acq {
		releases = append(releases, x.Released.Seen)
	}
	slices.SortFunc(releases, func(x, y time.Time) int { return x.Compare(y) })
	var handoffs []time.Duration
	for _, x := range acq {
		i := sort.Search(len(releases), func(i int) bool { return !releases[i].Before(x.Held.Seen) })
		if i == 0 {
			continue // among the first k: no release before it
		}
		handoffs = append(handoffs, x.Held.Seen.Sub(releases[i-1]))
	}
	slices.Sort(handoffs)
	pct := func(p float64) time.Duration { return handoffs[int(p*float64(len(handoffs)-1))] }
	return pct(0.5), pct(0.99), float64(requests.Load()-startRequests) / float64(len(acq))
}

func waitAll(b *testing.B, ctx context.Context, hosts []*cluster.SimHost) {
	for {
		done := true
		for _, h := range hosts {
			if h.Boots() < 2 || h.RebootRequired() {
				done = false
			}
		}
		if done {
			// and every claim released
			if n, err := claimed(ctx, hosts); err == nil && n == 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			b.Fatal("roll did not finish")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func claimed(ctx context.Context, hosts []*cluster.SimHost) (int, error) {
	n := 0
	for _, h := range hosts {
		node, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if _, ok := node.Labels[claim.Label]; ok {
			n++
		}
	}
	return n, nil
}
