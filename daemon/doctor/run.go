package doctor

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/kube"
)

// Options are what `kured-host check` gives Run besides the configuration.
type Options struct {
	Config config.Config
	// Root prefixes the host's paths, as for `run` (--host-root).
	Root host.Root
	// Kubeconfig overrides the kubeconfig discovery (--kubeconfig).
	Kubeconfig string
	// BusAddress is the D-Bus to find logind and systemd on; "" is the
	// system bus.
	BusAddress string
	UserAgent  string
	// Timeout bounds each request to the API server and to D-Bus.
	Timeout time.Duration
	// UID is the user check runs as (os.Geteuid()).
	UID int
}

// Run checks everything the configuration makes the daemon need, in the
// order the daemon needs it, and passes each finding to report as soon as
// it is known.
func Run(ctx context.Context, o Options, report func(Finding)) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	c := o.Config
	cluster(ctx, o, report)
	report(Sentinel(c.Sentinel, o.Root, Watch))
	report(BootID(o.Root))
	if c.Reboot.Method == config.RebootCommand {
		report(Executable("reboot", "reboot.command", c.Reboot.Command))
	}
	if len(c.Health.Command) > 0 {
		report(Executable("health", "health.command", c.Health.Command))
	}
	if c.Blockers.Prometheus.URL.URL() != nil {
		pctx, cancel := context.WithTimeout(ctx, o.Timeout)
		report(Prometheus(pctx, block.NewAlerts(c.Blockers.Prometheus)))
		cancel()
	}
	if use := (LogindUse{Reboot: c.Reboot.Method == config.RebootLogind, Inhibitors: c.Blockers.Inhibitors, UID: o.UID}); use.Reboot || use.Inhibitors {
		bctx, cancel := context.WithTimeout(ctx, o.Timeout)
		report(Logind(bctx, DialLogind(o.BusAddress), use))
		cancel()
	}
	if a := c.Metrics.Address; a != "" {
		report(Metrics(ctx, a, nil))
	}
}

// cluster checks the kubeconfig, the identity, the Node, the permissions
// and the clock, with the node's own credentials as `run` uses them.
func cluster(ctx context.Context, o Options, report func(Finding)) {
	c := o.Config
	fctx, cancel := context.WithTimeout(ctx, o.Timeout)
	kc, err := FindKubeconfig(fctx, o.Root, c.Kubernetes.Kubeconfig, o.Kubeconfig, host.Units{Address: o.BusAddress})
	cancel()
	if err != nil {
		report(Kubeconfig("", "", "", err))
		return
	}
	clock := kube.NewServerClock()
	rest, err := kc.Rest(o.UserAgent, clock)
	if err != nil {
		report(Kubeconfig("", "", "", err))
		return
	}
	rest.Timeout = o.Timeout
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		report(Kubeconfig("", "", "", err))
		return
	}
	report(Kubeconfig(kc.Path, kc.How, rest.Host, nil))
	api := KubeAPI{Client: client}
	f, node, asked := Identity(ctx, api, c.Kubernetes.NodeName)
	report(f)
	if asked {
		if node != "" {
			boot, _ := o.Root.BootID() // reported by the boot ID check
			report(Node(ctx, api, node, boot, c.Lock.Groups))
		}
		for _, f := range Permissions(ctx, api, node) {
			report(f)
		}
	}
	// Even a refusal (an expired certificate) carries the server's Date.
	offset, seen := clock.Offset()
	report(Clock(offset, seen, BoundsFor(c.Lock)))
}
