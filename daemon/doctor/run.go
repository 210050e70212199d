package doctor

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/steer"
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
	// Reload loads the configuration with the cluster's settings under
	// the host's files, as the daemon does when it joins; nil skips the
	// settings.
	Reload func(cluster string) error
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
	report(Window(c.Window, time.Now()))
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
	if o.Reload != nil {
		report(Settings(ctx, steer.Reader{Client: client, Node: node}, o.Reload))
	}
	// Even a refusal (an expired certificate) carries the server's Date.
	offset, seen := clock.Offset()
	report(Clock(offset, seen, BoundsFor(c.Lock)))
}

// Settings reads the cluster's settings as the node would and validates
// them under this host's files. Bad settings fail the check: the nodes
// keep what they had until they are fixed.
func Settings(ctx context.Context, r interface {
	Settings(context.Context) (string, error)
}, reload func(string) error) Finding {
	const check = "settings"
	text, err := r.Settings(ctx)
	switch {
	case err != nil:
		return finding(Fail, check, "cannot read the cluster's settings: %v", err)
	case text == "":
		return finding(OK, check, "no cluster settings: this host's files and the built-in defaults")
	}
	if err := reload(text); err != nil {
		return Finding{Level: Fail, Check: check, Message: "the cluster's settings are not valid; the nodes keep what they had",
			Detail: err.Error()}
	}
	return finding(OK, check, "the cluster's settings (%s/%s) are valid under this host's files (kured-host settings shows them)", steer.Namespace, steer.Name)
}
