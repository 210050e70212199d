package metrics

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestServeOutlivesATakenAddress: a program that holds metrics.address
// first must not stop the daemon. Serve used to return the bind error,
// and run exited at every start (a node that rebooted holding a slot
// never released it). Now it says so, counts it and serves once the port
// is free.
func TestServeOutlivesATakenAddress(t *testing.T) {
	holder, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	addr := holder.Addr().String()

	m := New()
	var logs syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		m.Serve(ctx, addr, slog.New(slog.NewTextHandler(&logs, nil)))
	}()

	failed := m.Errors.WithLabelValues("metrics")
	eventually(t, "failed listen logged and counted", func() bool {
		select {
		case <-returned:
			t.Fatalf("Serve returned while %s was taken and the daemon runs: run would stop (log: %s)", addr, logs.String())
		default:
		}
		return testutil.ToFloat64(failed) >= 1 && strings.Contains(logs.String(), "level=ERROR")
	})
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "address already in use") ||
		!strings.Contains(l, "ss -ltnp") || !strings.Contains(l, "retry_in=") {
		t.Errorf("log does not say what failed, what to check and when it tries again:\n%s", l)
	}

	// The holder goes; the next try binds, and the scrape sees the failure.
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	var body string
	eventually(t, "a scrape of "+addr, func() bool {
		body = scrape(addr)
		return body != ""
	})
	if !strings.Contains(body, `kured_host_errors_total{kind="metrics"}`) {
		t.Errorf("scrape has no metrics errors counter:\n%s", body)
	}
	if !strings.Contains(logs.String(), "serving metrics") {
		t.Errorf("no \"serving metrics\" in the log:\n%s", logs.String())
	}

	// ctx ends: Serve returns and lets the port go.
	cancel()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after ctx ended")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still held after Serve returned: %v", err)
	}
	_ = l.Close()
}

// scrape GETs /metrics at addr: the body, or "" if that did not work.
func scrape(addr string) string {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// eventually waits for cond, with a deadline generous enough for a
// loaded machine: it is only reached when something is broken.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("no %s after 30 s", what)
		case <-tick.C:
		}
	}
}

// syncBuffer is a log destination that the test reads while Serve writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
