package block

import (
	"context"
	"fmt"
	"strings"

	"github.com/kured-host/kured-host/daemon/host"
)

// InhibitorLister lists logind's inhibitors.
type InhibitorLister interface {
	Inhibitors(ctx context.Context) ([]host.Inhibitor, error)
}

// Inhibitors blocks while logind has an inhibitor in block mode on
// shutdown (a package manager at work, for example).
type Inhibitors struct {
	Logind InhibitorLister
}

var _ Blocker = (*Inhibitors)(nil)

// Kind implements Blocker.
func (i *Inhibitors) Kind() string { return "inhibitors" }

// Check implements Blocker.
func (i *Inhibitors) Check(ctx context.Context) (string, error) {
	all, err := i.Logind.Inhibitors(ctx)
	if err != nil {
		return "", err
	}
	blocking := host.BlockingShutdown(all)
	if len(blocking) == 0 {
		return "", nil
	}
	who := make([]string, len(blocking))
	for j, b := range blocking {
		who[j] = b.String()
	}
	return fmt.Sprintf("shutdown is inhibited by %s", strings.Join(who, "; ")), nil
}
