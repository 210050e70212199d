// Package kube connects kured-host to the API server with the node's own
// credentials: it finds the kubelet's kubeconfig, learns the node's name
// from them, and keeps an estimate of the API server's clock.
package kube

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Tune sets the daemon's client settings on cfg: a rate limit above
// client-go's default (5/s, burst 10), which a drain of many pods would
// wait on, and protobuf as the kubelet speaks it. Nodes are the daemon's
// biggest reads (a real Node's status lists its images): protobuf is
// about a third of the bytes of JSON and several times cheaper to encode
// and decode, for this host and for the API server, which encodes every
// watch event once per watcher. Every object the daemon reads is a
// built-in type, which the API server serves as protobuf.
//
// And no gzip. Go's transport asks for it by default; the API server
// then compresses each event of a watch that began with its list
// (client-go's informers ask for that) with a fresh compressor, and every
// list over 128 KB. That is CPU on the API server, which the kubelets'
// heartbeats wait on, and on this host, to save bytes on the cluster's
// own network: a 500-node roll spent 2.2 CPU seconds of the API server's
// and 1.7 of the daemons' on it. The control plane's own components turn
// it off for the same reason (kubernetes/kubernetes#80919, #112296).
func Tune(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = 20, 40
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.DisableCompression = true
}

// WhoAmI returns the user name and groups of the client's credentials, as
// the API server sees them (SelfSubjectReview).
func WhoAmI(ctx context.Context, client kubernetes.Interface) (string, []string, error) {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	return r.Status.UserInfo.Username, r.Status.UserInfo.Groups, nil
}

// NodeName learns the node's name from its credentials
// (SelfSubjectReview): the user must be system:node:<name>.
func NodeName(ctx context.Context, client kubernetes.Interface) (string, error) {
	user, _, err := WhoAmI(ctx, client)
	if err != nil {
		return "", fmt.Errorf("who am I (SelfSubjectReview): %w", err)
	}
	name, ok := strings.CutPrefix(user, "system:node:")
	if !ok || name == "" {
		return "", fmt.Errorf("the credentials are %q, not a node's (system:node:<name>): use the kubelet's kubeconfig, or set kubernetes.node_name", user)
	}
	return name, nil
}

// ServerClock estimates the API server's clock from the Date header of its
// replies: the queue order (`since`) is the server's time, not this host's.
// Date has whole seconds, so one reply bounds the offset to a window of a
// second plus the round trip, which narrows to about a round trip after a
// few dozen replies. While that window contains zero, the estimate is zero:
// a host whose clock agrees with the server's replies keeps it. Otherwise
// it is the middle of the window. The middle alone put a synchronised host
// up to half a second off for its first replies, so a node that joined the
// queue later could take a place ahead of one that had already read the
// queue (a CI run of TestPauseAndHold: 0.3 s). A reply outside the window
// (this host's clock was set, or drifted) starts over from that reply.
type ServerClock struct {
	mu     sync.Mutex
	lo, hi time.Duration // the offset lies in [lo, hi]
	seen   bool
	now    func() time.Time
}

// NewServerClock starts with no offset.
func NewServerClock() *ServerClock { return &ServerClock{now: time.Now} }

// Now is this host's clock corrected by the estimated offset.
func (c *ServerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now().Add(c.offset())
}

func (c *ServerClock) offset() time.Duration {
	if c.lo <= 0 && c.hi >= 0 {
		return 0
	}
	return c.lo + (c.hi-c.lo)/2
}

// Offset is the server's clock minus this host's, and whether a reply has
// been seen yet.
func (c *ServerClock) Offset() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset(), c.seen
}

// observe narrows the window with a reply sent at sent, received at
// received, stamped date by the server.
func (c *ServerClock) observe(sent, received, date time.Time) {
	// The server stamped the reply between sent and received (host time),
	// at a time in [date, date+1s).
	lo, hi := date.Sub(received), date.Add(time.Second).Sub(sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen || lo > c.hi || hi < c.lo {
		c.lo, c.hi, c.seen = lo, hi, true
		return
	}
	c.lo, c.hi = max(c.lo, lo), min(c.hi, hi)
}

// Wrap records the Date header of every reply.
func (c *ServerClock) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent := c.now()
		resp, err := rt.RoundTrip(r)
		if err != nil {
			return resp, err
		}
		if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			c.observe(sent, c.now(), d)
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Ready reports whether the Node's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
