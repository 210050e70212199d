package kube

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// reconnecting closes every connection to the API server when a reply is
// 401 Unauthorized, so that the next request makes a new TLS handshake and
// presents the client certificate as it is on disk now. client-go reads
// the kubelet's rotated certificate again only every five minutes, or at a
// new handshake: with the old certificate expired and the connection kept
// open (a watch holds it), the daemon was refused for minutes.
type reconnecting struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	now  func() time.Time

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed time.Time // when they were last closed for a 401
}

// closeEvery bounds how often a 401 closes the connections: credentials
// that are simply wrong get one new handshake, not one per request.
const closeEvery = 10 * time.Second

func newReconnecting() *reconnecting {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &reconnecting{dial: d.DialContext, now: time.Now, conns: map[*trackedConn]struct{}{}}
}

// install makes cfg dial through r and close its connections on a 401.
func (r *reconnecting) install(cfg *rest.Config) {
	cfg.Dial = r.DialContext
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusUnauthorized {
				r.closeAll()
			}
			return resp, err
		})
	})
}

// DialContext dials and remembers the connection.
func (r *reconnecting) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := r.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	t := &trackedConn{Conn: c, r: r}
	r.mu.Lock()
	r.conns[t] = struct{}{}
	r.mu.Unlock()
	return t, nil
}

func (r *reconnecting) closeAll() {
	r.mu.Lock()
	if now := r.now(); now.Sub(r.closed) >= closeEvery {
		r.closed = now
	} else {
		r.mu.Unlock()
		return
	}
	conns := make([]*trackedConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	r    *reconnecting
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.r.mu.Lock()
		delete(c.r.conns, c)
		c.r.mu.Unlock()
	})
	return c.Conn.Close()
}
