package metrics

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestServeRetries: each failure, whether to listen or to serve, is
// counted and tried again, after a wait that doubles up to the cap; then
// the metrics are served.
func TestServeRetries(t *testing.T) {
	inUse := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	for _, tc := range []struct {
		name string
		// fail is the listener (or error) of each try before the good one.
		fail []func() (net.Listener, error)
	}{
		{"bind fails", repeat(9, func() (net.Listener, error) { return nil, inUse })},
		{"server stops", repeat(2, func() (net.Listener, error) { return brokenListener{}, nil })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			s := m.server("127.0.0.1:0", slog.New(slog.DiscardHandler))
			s.firstRetry, s.maxRetry = time.Second, time.Minute
			var waits []time.Duration
			s.wait = func(ctx context.Context, d time.Duration) error {
				waits = append(waits, d)
				return nil
			}
			tries := tc.fail
			addr := make(chan string, 1)
			listen := s.listen
			s.listen = func(ctx context.Context) (net.Listener, error) {
				if len(tries) > 0 {
					try := tries[0]
					tries = tries[1:]
					return try()
				}
				l, err := listen(ctx)
				if err == nil {
					addr <- l.Addr().String()
				}
				return l, err
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			returned := make(chan struct{})
			go func() { defer close(returned); s.run(ctx) }()

			a := <-addr
			eventually(t, "a scrape of "+a, func() bool { return scrape(a) != "" })
			cancel()
			<-returned
			want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}[:len(tc.fail)]
			for i := range want {
				want[i] *= time.Second
			}
			if !slices.Equal(waits, want) {
				t.Errorf("waits %v, want %v", waits, want)
			}
			if got := testutil.ToFloat64(m.Errors.WithLabelValues("metrics")); got != float64(len(tc.fail)) {
				t.Errorf("%v metrics errors counted, want %d", got, len(tc.fail))
			}
		})
	}
}

// TestServeStopsWhileWaiting: ctx ending during the wait before the next
// try ends Serve.
func TestServeStopsWhileWaiting(t *testing.T) {
	s := New().server("127.0.0.1:0", slog.New(slog.DiscardHandler))
	s.firstRetry = time.Hour
	waiting := make(chan struct{})
	s.listen = func(ctx context.Context) (net.Listener, error) { return nil, syscall.EADDRNOTAVAIL }
	s.wait = func(ctx context.Context, d time.Duration) error {
		close(waiting)
		return sleep(ctx, d)
	}
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	go func() { defer close(returned); s.run(ctx) }()
	<-waiting
	cancel()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Serve still waiting to try again after ctx ended")
	}
}

// TestIdleConnectionClosed: a keep-alive connection nobody uses is closed
// by the server (it used to stay open for good, about 20 KiB each).
func TestIdleConnectionClosed(t *testing.T) {
	addr := start(t, func(s *server) {
		s.idleTimeout = 100 * time.Millisecond
		// Only the idle timeout can close it before the deadline below.
		s.readHeaderTimeout, s.readTimeout = 10*time.Minute, 10*time.Minute
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d, close %v: want 200 on a connection kept alive", resp.StatusCode, resp.Close)
	}
	// Nothing more is sent: the server must close the connection (EOF),
	// well before this deadline.
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %v, want EOF (closed by the server)", err)
	}
}

// TestConnectionCap: beyond maxConns, a connection is not accepted until
// one of those served closes.
func TestConnectionCap(t *testing.T) {
	var conns connCounter
	addr := start(t, func(s *server) {
		s.maxConns = 2
		// The held connections are not timed out during the test.
		s.readHeaderTimeout, s.readTimeout = 10*time.Minute, 10*time.Minute
		listen := s.listen
		s.listen = func(ctx context.Context) (net.Listener, error) {
			l, err := listen(ctx)
			if err != nil {
				return nil, err
			}
			return &countingListener{Listener: l, n: &conns}, nil
		}
	})
	dial := func(request string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Two connections hold the two places, each with half a request.
	held := []net.Conn{
		dial("GET /metrics HTTP/1.1\r\nHost: metrics\r\n"),
		dial("GET /metrics HTTP/1.1\r\nHost: metrics\r\n"),
	}
	eventually(t, "2 connections accepted", func() bool { return conns.accepted() == 2 })

	extra := dial("GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n")
	// A server without the cap answers this in well under a millisecond;
	// with it, nothing comes, however long the wait. So the wait only has
	// to be long enough to catch a missing cap, and a loaded machine can
	// at worst miss it, never fail a server that has it. The count below
	// catches it too, without a wait.
	if err := extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n, err := extra.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection beyond the cap: read %d bytes, %v; want nothing until one closes", n, err)
	}

	if err := held[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := extra.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("connection beyond the cap, after one closed: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
	if n, most := conns.accepted(), conns.most(); n != 3 || most != 2 {
		t.Errorf("%d connections accepted, at most %d open at once; want 3, at most 2", n, most)
	}
}

// start runs a server on a free loopback port, with what set changes,
// until the test ends.
func start(t *testing.T, set func(*server)) string {
	t.Helper()
	s := New().server("127.0.0.1:0", slog.New(slog.DiscardHandler))
	set(s)
	addr := make(chan string, 1)
	listen := s.listen
	s.listen = func(ctx context.Context) (net.Listener, error) {
		l, err := listen(ctx)
		if err == nil {
			addr <- l.Addr().String()
		}
		return l, err
	}
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	go func() { defer close(returned); s.run(ctx) }()
	t.Cleanup(func() { cancel(); <-returned })
	select {
	case a := <-addr:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("no listener after 30 s")
		return ""
	}
}

func repeat(n int, f func() (net.Listener, error)) []func() (net.Listener, error) {
	fs := make([]func() (net.Listener, error), n)
	for i := range fs {
		fs[i] = f
	}
	return fs
}

// brokenListener fails to accept, with an error that stops http.Server.
type brokenListener struct{}

func (brokenListener) Accept() (net.Conn, error) { return nil, errors.New("accept broke") }
func (brokenListener) Close() error              { return nil }
func (brokenListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// connCounter counts the connections the server accepted and the most
// that were open at once. A connection counts as closed when the server
// begins to close it, before the cap lets the next one in.
type connCounter struct {
	mu               sync.Mutex
	n, open, maxOpen int
}

func (c *connCounter) opened() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.open++
	c.maxOpen = max(c.maxOpen, c.open)
}

func (c *connCounter) closed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
}

func (c *connCounter) accepted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *connCounter) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxOpen
}

// countingListener is the listener under the cap.
type countingListener struct {
	net.Listener
	n *connCounter
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.opened()
	return &countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n    *connCounter
	once sync.Once
}

func (c *countingConn) Close() error {
	c.once.Do(c.n.closed)
	return c.Conn.Close()
}
