package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/kured-host/kured-host/daemon/alarm"
	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/events"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/metrics"
	"github.com/kured-host/kured-host/daemon/notify"
	"github.com/kured-host/kured-host/daemon/sentinel"
	"github.com/kured-host/kured-host/daemon/steer"
)

// Setup is what `kured-host run` gives Assemble besides the configuration.
type Setup struct {
	Config config.Config
	// Root prefixes the host's paths (sentinel, boot ID, kubeconfig
	// discovery): --host-root.
	Root      host.Root
	Log       *slog.Logger
	Manager   ServiceManager
	UserAgent string
	// BusAddress is the D-Bus to find logind and systemd on; "" is the
	// system bus.
	BusAddress string
	// Reload loads the configuration again with the cluster's settings
	// under the host's files (config.LoadWithCluster); nil keeps Config
	// as it is.
	Reload func(cluster string) (config.Config, error)
}

// Assemble connects to the API server with the node's own credentials,
// checks the permissions the lock needs, and builds the daemon.
func Assemble(ctx context.Context, s Setup) (*Daemon, error) {
	c, node, err := connect(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := kube.CheckAccess(ctx, c.Kube); err != nil {
		return nil, err
	}
	d, err := build(s, c, node)
	if err != nil {
		return nil, err
	}
	if addr := s.Config.Metrics.Address; addr != "" {
		// Never an error: while the address cannot be listened on, Serve
		// logs, counts and tries again, and the cycle goes on without it.
		go d.Metrics.Serve(ctx, addr, s.Log)
	}
	return d, nil
}

// MarkStopped is what the unit runs when the daemon has stopped
// (`kured-host stopped`, ExecStopPost=): it connects as the daemon does
// and marks the node's waiting claim, if it has one (lock.MarkStopped).
func MarkStopped(ctx context.Context, s Setup) (bool, error) {
	c, node, err := connect(ctx, s)
	if err != nil {
		return false, err
	}
	return lock.MarkStopped(ctx, c.Kube, node)
}

// connect finds the node's kubeconfig and connects with it; it returns
// the clients and the node's name.
func connect(ctx context.Context, s Setup) (Clients, string, error) {
	cfg, log := s.Config, s.Log
	kc, err := kube.Find(ctx, s.Root, cfg.Kubernetes.Kubeconfig, host.Units{Address: s.BusAddress})
	if err != nil {
		return Clients{}, "", err
	}
	clock := kube.NewServerClock()
	rest, err := kc.Rest(s.UserAgent, clock)
	if err != nil {
		return Clients{}, "", err
	}
	c := Clients{ServerNow: clock.Now}
	if c.Kube, err = kubernetes.NewForConfig(rest); err != nil {
		return Clients{}, "", fmt.Errorf("client for %s: %w", kc.Path, err)
	}
	if c.Metadata, err = metadata.NewForConfig(rest); err != nil {
		return Clients{}, "", fmt.Errorf("client for %s: %w", kc.Path, err)
	}
	if c.Evictions, err = drain.EvictionClient(rest); err != nil {
		return Clients{}, "", fmt.Errorf("client for %s: %w", kc.Path, err)
	}
	node := cfg.Kubernetes.NodeName
	if node == "" {
		if node, err = kube.NodeName(ctx, c.Kube); err != nil {
			return Clients{}, "", err
		}
	}
	log.Info("connected", "kubeconfig", kc.Path, "found_by", kc.How, "server", rest.Host, "node", node)
	return c, node, nil
}

// Clients are the API server, as the node's credentials reach it.
type Clients struct {
	Kube     kubernetes.Interface
	Metadata metadata.Interface
	// Evictions is Kube adjusted for the drain (drain.EvictionClient).
	Evictions kubernetes.Interface
	// ServerNow is the API server's time as its replies tell it.
	ServerNow func() time.Time
}

// build wires the daemon of the configuration on node: what Assemble does
// once connected, kept apart so that tests can check the wiring.
func build(s Setup, c Clients, node string) (*Daemon, error) {
	cfg, log := s.Config, s.Log
	m := metrics.New()
	logind := &host.BusLogind{Address: s.BusAddress}
	tolerance, _ := cfg.Lock.ClockTolerance()
	watch := &steer.Watch{Client: c.Kube, Metadata: c.Metadata, Node: node, Log: log.With("component", "steer")}
	looks := steer.Reader{Client: c.Kube, Node: node, Cached: true, Watch: watch}
	orders, fresh := Orders(looks), FreshOrders(steer.Reader{Client: c.Kube, Node: node}, time.Now)
	announce := WithFresh(orders, fresh)
	l := lock.New(lock.Options{
		Client: c.Kube, Metadata: c.Metadata, Node: node, Limits: cfg.Lock.Limits(),
		WaitingGrace: cfg.Lock.WaitingGrace.Std(), TTL: cfg.Lock.TTL.Std(),
		AlarmAge: cfg.Lock.AlarmAge.Std(), EnteringAlarmAge: cfg.Lock.EnteringAlarmAge.Std(),
		ServerNow: c.ServerNow, ClockTolerance: tolerance, BootID: s.Root.BootID, Log: log,
		Alarms:      &alarm.Report{Events: &events.Recorder{Client: c.Kube, Host: node}, Metrics: m, Log: log},
		MayAnnounce: MayGo(announce),
		Held:        steer.HoldIn,
		OwnWatched:  watch.OwnNode,
	})
	messages := notify.New(cfg.Notify, node, log)
	if messages != nil {
		messages.Failed = func() { m.Errors.WithLabelValues("notify").Inc() }
	}
	var reboot Rebooter = logind
	if cfg.Reboot.Method == config.RebootCommand {
		reboot = host.CommandRebooter{Argv: cfg.Reboot.Command, Timeout: cfg.Reboot.Timeout.Std()}
	}
	return &Daemon{
		Config: cfg, Log: log, Manager: s.Manager, Lock: l, Node: node, Metrics: m,
		Events: &events.Limited{
			Sink: &events.Recorder{Client: c.Kube, Host: node}, Now: time.Now,
			Repeat: time.Hour, Spacing: time.Minute,
		},
		Marks: &marks.Marker{
			Client: c.Kube, Node: node, Annotate: cfg.Node.Annotate,
			Pre: cfg.Node.PreRebootLabels, Post: cfg.Node.PostRebootLabels, Observe: l.Observe,
		},
		Messages: messenger(messages),
		Sentinel: sentinelFor(cfg.Sentinel, s.Root),
		Blockers: append(orders, blockersFor(cfg, c.Kube, node, logind)...),
		// The settings are read once per join, through the API server's
		// cache as before: a daemon just started read them from its
		// watch older than that cache, once, in CI (TestClusterSettings).
		Settings:    steer.Reader{Client: c.Kube, Node: node, Cached: true},
		OrdersWatch: watch,
		FreshOrders: fresh,
		Reload:      s.Reload,
		BlockersFor: func(cfg config.Config) []block.Blocker {
			return append(orders, blockersFor(cfg, c.Kube, node, logind)...)
		},
		Drainer: &drain.Drainer{Client: c.Evictions, Node: node, Log: log.With("component", "drain"), Options: drain.Options{
			GracePeriod: cfg.Drain.GracePeriod.Std(), Timeout: cfg.Drain.Timeout.Std(),
			PodSelector: cfg.Drain.PodSelector.Selector(), SkipWaitForDeleteTimeout: cfg.Drain.SkipWaitForDeleteTimeout.Std(),
			DeleteEmptyDirData: cfg.Drain.DeleteEmptyDirData, EvictUnreplicated: cfg.Drain.EvictUnreplicated,
		}, Observe: l.Observe, Confirm: func(ctx context.Context) error { _, err := l.Confirm(ctx); return err }},
		Rebooter: reboot,
		Health:   healthFor(cfg.Health),
		Watchdog: host.WatchdogInterval(),
		Trim:     host.TrimBinary,
		BootID:   s.Root.BootID,
		Ready: func() ReadyWait {
			return &kube.ReadyWatch{Client: c.Kube, Node: node, Boot: s.Root.BootID, Observe: l.Observe}
		},
	}, nil
}

// messenger keeps a nil *notify.Notifier from becoming a non-nil
// interface.
func messenger(n *notify.Notifier) Messenger {
	if n == nil {
		return nil
	}
	return n
}

// healthFor is the health check of the configuration; nil when there is
// no health command.
func healthFor(c config.HealthConfig) func(context.Context, time.Duration) error {
	if len(c.Command) == 0 {
		return nil
	}
	return HealthCommand(c.Command)
}

func sentinelFor(c config.SentinelConfig, root host.Root) sentinel.Checker {
	if len(c.Command) > 0 {
		return sentinel.Command{Argv: c.Command, RebootCodes: c.RebootExitCodes, Timeout: c.CommandTimeout.Std()}
	}
	return sentinel.File{Path: root.Path(c.File)}
}

// Orders are an operator's orders from kubectl, as blockers: the
// cluster's pause and this node's hold (daemon/steer), as r reads them,
// from a watch or the API server's watch cache.
func Orders(r steer.Reader) []block.Blocker {
	return []block.Blocker{steer.Paused{Reader: r}, steer.Held{Reader: r}}
}

// freshFor is how long a fresh read of the pause answers the next look:
// the look right before the cordon follows the one right before the
// announce by the announce, the verify and the commit, a few round trips;
// a pause set since is obeyed from its second second (docs/claims.md).
const freshFor = time.Second

// FreshOrders are the orders read fresh (not from a watch or a cache), for
// the looks right before the announce and right before the cordon; a read
// answers both when they come within freshFor of each other. Only the
// pause: the hold is a label on the Node the commit is conditional on,
// which the lock checks itself (lock.Options.Held, steer.HoldIn).
func FreshOrders(r steer.Reader, now func() time.Time) []block.Blocker {
	return []block.Blocker{&block.Recent{Blocker: steer.Paused{Reader: r}, For: freshFor, Now: now}}
}

// WithFresh is blockers with the fresh ones in place of those of their
// kinds.
func WithFresh(blockers, fresh []block.Blocker) []block.Blocker {
	kinds := map[string]bool{}
	for _, b := range fresh {
		kinds[b.Kind()] = true
	}
	out := slices.Clone(fresh)
	for _, b := range blockers {
		if !kinds[b.Kind()] {
			out = append(out, b)
		}
	}
	return out
}

// MayGo asks blockers, as the lock does right before it announces (the
// orders: the pause fresh, a hold from the watch) and right before it
// commits and cordons (every blocker, the orders fresh: the last look):
// one that says no since the last look stops the node before it takes
// the slot.
func MayGo(blockers []block.Blocker) func(context.Context) error {
	return func(ctx context.Context) error {
		if b := block.Check(ctx, blockers); len(b) > 0 {
			return errors.New(block.Summary(b))
		}
		return nil
	}
}

func blockersFor(cfg config.Config, client kubernetes.Interface, node string, logind block.InhibitorLister) []block.Blocker {
	var bs []block.Blocker
	if win := block.NewWindow(cfg.Window); !win.Always() {
		bs = append(bs, win)
	}
	if len(cfg.Blockers.PodSelectors) > 0 {
		p := &block.Pods{Client: client, Node: node}
		for _, s := range cfg.Blockers.PodSelectors {
			p.Selectors = append(p.Selectors, s.Selector())
		}
		bs = append(bs, p)
	}
	if prom := cfg.Blockers.Prometheus; prom.URL.URL() != nil {
		bs = append(bs, block.NewAlerts(prom))
	}
	if cfg.Blockers.Inhibitors {
		bs = append(bs, &block.Inhibitors{Logind: logind})
	}
	return bs
}
