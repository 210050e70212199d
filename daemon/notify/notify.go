// Package notify sends kured's chat and webhook messages (drain, reboot,
// uncordon, and failures) through shoutrrr, which knows the services'
// APIs (Slack, Teams, Matrix, generic webhooks and many more) so that
// kured's notification URLs keep working unchanged. A message that cannot
// be sent is logged and counted; it never holds up the cycle.
package notify

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/nicholas-fedor/shoutrrr/pkg/router"
	"github.com/nicholas-fedor/shoutrrr/pkg/types"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/redact"
)

// Kind is what a message is about.
type Kind string

// The kinds of message, one template each.
const (
	Drain    Kind = "drain"
	Reboot   Kind = "reboot"
	Uncordon Kind = "uncordon"
	Failure  Kind = "failure"
)

// sender is shoutrrr's router as used here.
type sender interface {
	Send(message string, params *types.Params) []error
}

// service is one notification URL and the router that sends to it. One
// router per URL, so that a failure can be told apart from the others and
// named (redacted): shoutrrr returns a router's errors in the order they
// come, not in the order of its services. sender is nil until the router
// could be prepared.
type service struct {
	key    string // "notify.urls[0]"
	url    *url.URL
	sender sender
}

// Notifier sends the configured messages about one node.
type Notifier struct {
	mu        sync.Mutex // guards services[i].sender
	services  []service
	urls      []*url.URL // all of them, whose secrets no log line may show
	templates map[Kind]config.Template
	node      string
	log       *slog.Logger
	// Failed is called once per failed send (for the metrics).
	Failed func()
}

// Timeout bounds one message to all services, so that a service that
// does not answer delays the cycle by at most this.
const Timeout = 10 * time.Second

// New prepares the services of c.URLs. The configuration's loader has
// refused every URL the library cannot parse; a service that still cannot
// be prepared (matrix logs in to its server here, and the server may be
// down at boot) is logged and tried again at each message, because a
// message that cannot be sent must never stop the daemon. With no URLs it
// returns nil, a Notifier that sends nothing.
func New(c config.NotifyConfig, node string, log *slog.Logger) *Notifier {
	if len(c.URLs) == 0 {
		return nil
	}
	n := &Notifier{
		node: node, log: log.With("component", "notify"),
		templates: map[Kind]config.Template{
			Drain: c.TemplateDrain, Reboot: c.TemplateReboot,
			Uncordon: c.TemplateUncordon, Failure: c.TemplateFailure,
		},
	}
	for _, u := range c.URLs {
		n.urls = append(n.urls, u.URL())
	}
	for i, u := range n.urls {
		n.services = append(n.services, service{key: fmt.Sprintf("notify.urls[%d]", i), url: u})
		if _, err := n.sender(i); err != nil {
			n.log.Warn("cannot prepare a notification service; trying again at each message", "err", err)
		}
	}
	return n
}

// sender returns the router of service i, preparing it if it is not yet.
func (n *Notifier) sender(i int) (sender, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	svc := &n.services[i]
	if svc.sender != nil {
		return svc.sender, nil
	}
	r, err := newRouter(svc.url)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", svc.key, redact.URL(svc.url), redact.Error(err, n.urls...))
	}
	svc.sender = r
	return r, nil
}

// newRouter prepares shoutrrr's router for u. Its parsers are fed what the
// operator wrote: a panic in one is an error here.
func newRouter(u *url.URL) (r *router.ServiceRouter, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the notification library fails on this URL (%v)", p)
		}
	}()
	// shoutrrr's errors quote the URL, or the token alone: the caller
	// redacts them.
	r, err = router.New(nil)
	if err != nil {
		return nil, err
	}
	r.Timeout = Timeout
	if err := r.AddService(u.String()); err != nil {
		return nil, err
	}
	return r, nil
}

// Send renders the template for kind and sends it to every service. reason
// fills {{.Reason}} (failures). A nil Notifier sends nothing.
func (n *Notifier) Send(ctx context.Context, kind Kind, reason string) {
	if n == nil || ctx.Err() != nil {
		return
	}
	msg, err := n.templates[kind].Render(config.MessageData{Node: n.node, Reason: reason})
	if err != nil || msg == "" {
		if err != nil {
			n.log.Warn("cannot render the message", "kind", string(kind), "err", err)
		}
		return
	}
	// The services are asked at once, each bounded by Timeout.
	failed := make([]int, len(n.services))
	var wg sync.WaitGroup
	for i, svc := range n.services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := n.sender(i)
			if err != nil {
				n.log.Warn("cannot send a notification; carrying on", "kind", string(kind), "err", err)
				failed[i]++
				return
			}
			for _, err := range s.Send(msg, nil) {
				if err != nil {
					n.log.Warn("cannot send a notification; carrying on", "kind", string(kind),
						"url", redact.URL(svc.url), "err", redact.Error(err, n.urls...))
					failed[i]++
				}
			}
		}()
	}
	wg.Wait()
	for _, f := range failed {
		for range f {
			if n.Failed != nil {
				n.Failed()
			}
		}
	}
}
