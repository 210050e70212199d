// Package block decides whether something keeps this node from starting a
// reboot now: the maintenance window, pods matching a blocking selector,
// firing Prometheus alerts, or logind inhibitors in block mode on shutdown
// (a package manager at work). Each blocker says why, in words. A blocker
// that cannot find out (Prometheus unreachable, no system bus) blocks.
package block

import (
	"context"
	"slices"
	"strings"
)

// Blocker is one reason a reboot may have to wait.
type Blocker interface {
	// Kind names the blocker for metrics and logs: window, pods, alerts,
	// inhibitors.
	Kind() string
	// Check returns why the reboot must wait, or "" if it need not.
	Check(ctx context.Context) (string, error)
}

// Blocked is one active blocker.
type Blocked struct {
	Kind   string
	Reason string
	// Failed says the check could not be made (the API server or
	// Prometheus unreachable): it is tried again sooner.
	Failed bool
}

func (b Blocked) String() string { return b.Kind + ": " + b.Reason }

// Check asks every blocker and returns those that block. A blocker that
// fails blocks, with the failure as its reason: a reboot must not start
// because a check could not be made.
func Check(ctx context.Context, bs []Blocker) []Blocked {
	var out []Blocked
	for _, b := range bs {
		reason, err := b.Check(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			out = append(out, Blocked{b.Kind(), "cannot tell, so waiting: " + err.Error(), true})
		case reason != "":
			out = append(out, Blocked{Kind: b.Kind(), Reason: reason})
		}
	}
	return out
}

// Failed reports whether any check in bs could not be made.
func Failed(bs []Blocked) bool {
	return slices.ContainsFunc(bs, func(b Blocked) bool { return b.Failed })
}

// Summary joins the reasons into one line.
func Summary(bs []Blocked) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.String()
	}
	return strings.Join(s, "; ")
}
