package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
)

// serveOn makes the API server reachable at addr (Options.ServeAddress),
// on a free port: the test server listens on 127.0.0.1 only, so a
// forwarder passes each connection through, TLS and client certificates
// untouched. It then checks, through the forwarder, that the server's
// certificate is valid for addr, as a client there will.
func (cp *ControlPlane) serveOn(addr string) error {
	if net.ParseIP(addr) == nil {
		return fmt.Errorf("serve address %q is not an IP address", addr)
	}
	u, err := url.Parse(cp.Server)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return fmt.Errorf("serve the API on %s: %w", addr, err)
	}
	cp.ServeURL = "https://" + l.Addr().String()
	cp.goRun(func(ctx context.Context) {
		<-ctx.Done()
		_ = l.Close()
	})
	cp.goRun(func(ctx context.Context) {
		for {
			c, err := l.Accept()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					cp.logf("serve on %s: %v", addr, err)
				}
				return
			}
			cp.goRun(func(ctx context.Context) { forward(ctx, c, u.Host) })
		}
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.ServerCA)
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: roots, ServerName: addr})
	if err != nil {
		return fmt.Errorf("the API server at %s: %w (the test server's certificate is valid for 127.0.0.1 and 10.0.0.1 only)", cp.ServeURL, err)
	}
	return conn.Close()
}

// forward copies c to and from a new connection to upstream until either
// side closes or ctx ends.
func forward(ctx context.Context, c net.Conn, upstream string) {
	defer c.Close()
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	select {
	case <-ctx.Done():
	case <-done:
	}
}
