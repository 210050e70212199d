package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
)

// The listener's limits. A Prometheus scrape is one small GET every scrape
// interval (15 s to a few minutes) on one keep-alive connection per
// Prometheus, answered in milliseconds; these are far from that, and bound
// what a local program can make the daemon hold (a connection costs about
// 20 KiB; the unit has MemoryMax).
const (
	// maxConns: an HA pair of Prometheus servers and a person with curl
	// need a handful. Beyond it, connections wait in the kernel's
	// backlog, not in the daemon.
	maxConns = 16
	// idleTimeout is above the default 1 min scrape interval, so that such
	// a scraper keeps its connection; slower ones reconnect, which is
	// cheap. A connection nobody uses is closed.
	idleTimeout = 90 * time.Second
	// readHeaderTimeout: a scrape's headers come in one packet.
	readHeaderTimeout = 10 * time.Second
	// readTimeout and writeTimeout: a request has no body, and the reply
	// is a few KiB written in well under Prometheus' 10 s scrape timeout.
	readTimeout  = 30 * time.Second
	writeTimeout = 30 * time.Second
	// maxHeaderBytes: Prometheus sends a few hundred bytes of headers.
	maxHeaderBytes = 8 << 10

	// A failed listen is tried again after firstRetry, then twice as long
	// each time up to maxRetry.
	firstRetry = time.Second
	maxRetry   = 5 * time.Minute
)

// Serve serves the metrics on /metrics at addr until ctx ends, and
// returns then. It never stops the daemon: while addr cannot be listened
// on (another program holds the port, the address is not on this host
// yet), or if the server stops, it logs an error, counts an error of kind
// "metrics" and tries again, after 1 s, then twice as long each time up
// to 5 min. Run it in its own goroutine.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) {
	m.server(addr, log).run(ctx)
}

// server is Serve with its limits and its clock open to tests.
type server struct {
	addr    string
	log     *slog.Logger
	handler http.Handler
	failed  prometheus.Counter

	listen func(ctx context.Context) (net.Listener, error)
	// wait returns after d, or with ctx's error when ctx ends first.
	wait                 func(ctx context.Context, d time.Duration) error
	firstRetry, maxRetry time.Duration

	maxConns                       int
	readHeaderTimeout, readTimeout time.Duration
	writeTimeout, idleTimeout      time.Duration
	maxHeaderBytes                 int
}

func (m *Metrics) server(addr string, log *slog.Logger) *server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	return &server{
		addr:    addr,
		log:     log.With("component", "metrics"),
		handler: mux,
		failed:  m.Errors.WithLabelValues("metrics"),
		listen: func(ctx context.Context) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, "tcp", addr)
		},
		wait:              sleep,
		firstRetry:        firstRetry,
		maxRetry:          maxRetry,
		maxConns:          maxConns,
		readHeaderTimeout: readHeaderTimeout,
		readTimeout:       readTimeout,
		writeTimeout:      writeTimeout,
		idleTimeout:       idleTimeout,
		maxHeaderBytes:    maxHeaderBytes,
	}
}

// run listens and serves until ctx ends, trying again after each failure.
func (s *server) run(ctx context.Context) {
	retry := s.firstRetry
	for {
		l, err := s.listen(ctx)
		if err == nil {
			if err = s.serve(ctx, l); err == nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Error("metrics not served; the daemon goes on without them and tries again",
			"address", s.addr, "err", err, "retry_in", retry, "check", s.hint(err))
		s.failed.Inc()
		if s.wait(ctx, retry) != nil {
			return
		}
		retry = min(2*retry, s.maxRetry)
	}
}

// serve serves on l until ctx ends (nil) or the server stops on its own.
func (s *server) serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.readHeaderTimeout,
		ReadTimeout:       s.readTimeout,
		WriteTimeout:      s.writeTimeout,
		IdleTimeout:       s.idleTimeout,
		MaxHeaderBytes:    s.maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Serve(netutil.LimitListener(l, s.maxConns)) }()
	s.log.Info("serving metrics", "address", l.Addr().String())
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-stopped
		return nil
	case err := <-stopped:
		// Serve has closed l.
		return fmt.Errorf("serve metrics on %s: %w", l.Addr(), err)
	}
}

// hint says what to look at for a failure to listen.
func (s *server) hint(err error) string {
	_, port, _ := net.SplitHostPort(s.addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Sprintf("another program holds the port (ss -ltnp 'sport = :%s'); stop it, or choose another metrics.address", port)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "the address is not on this host (yet): check the interface (ip address), or choose another metrics.address"
	case errors.Is(err, syscall.EACCES):
		return "ports below 1024 need CAP_NET_BIND_SERVICE, which the systemd unit does not grant: choose a port above 1023"
	}
	return "metrics.address in the configuration"
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
