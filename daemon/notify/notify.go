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
// come, not in the order of its services.
type service struct {
	url    *url.URL
	sender sender
}

// Notifier sends the configured messages about one node.
type Notifier struct {
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

// New prepares the services of c.URLs; a URL shoutrrr cannot use is an
// error naming it, redacted. With no URLs it returns nil, a Notifier that
// sends nothing.
func New(c config.NotifyConfig, node string, log *slog.Logger) (*Notifier, error) {
	if len(c.URLs) == 0 {
		return nil, nil
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
	for i, u := range c.URLs {
		// shoutrrr's errors quote the URL, or the token alone.
		r, err := router.New(nil)
		if err != nil {
			return nil, fmt.Errorf("notify.urls[%d] (%s): %w", i, u, redact.Error(err, n.urls...))
		}
		r.Timeout = Timeout
		if err := r.AddService(u.URL().String()); err != nil {
			return nil, fmt.Errorf("notify.urls[%d] (%s): %w", i, u, redact.Error(err, n.urls...))
		}
		n.services = append(n.services, service{url: u.URL(), sender: r})
	}
	return n, nil
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
			for _, err := range svc.sender.Send(msg, nil) {
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
