package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon"
	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/events"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/metrics"
	"github.com/kured-host/kured-host/daemon/notify"
	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/test/sim/api"
)

// Host is a simulated machine: its boots, the reboot sentinel, a kubelet
// stand-in that reports its Node Ready with the boot's ID, and the real
// kured-host daemon, which a reboot or a crash stops and a boot starts
// again.
type Host struct {
	w    *World
	Name string
	Zone string
	Cfg  config.Config
	// Clock is this host's clock's offset from the API server's.
	Clock time.Duration
	// KubeletDelay is how long the kubelet takes to report a new boot.
	KubeletDelay time.Duration
	// Graceful: the kubelet reports NotReady as the machine shuts down
	// (graceful node shutdown); otherwise the Node stays Ready from the
	// old boot until the node controller's grace runs out.
	Graceful bool

	boot atomic.Value // string: the current boot's ID ("" while down)

	mu sync.Mutex
	// epoch counts power cycles; a stale timer checks it.
	epoch   int
	up      bool
	dead    bool
	needed  bool
	daemon  *instance
	kubelet context.CancelFunc
	// Planned counts reboots the daemon asked for; Unplanned the others.
	Planned, Unplanned int
	// shuttingDown: a reboot was asked for and the machine is going down
	// (a second request then changes nothing, as with logind).
	shuttingDown bool
	// neededSince is when the current need for a reboot appeared.
	neededSince time.Time
	// blockedUntil: a blocker says no until then (Unix nanoseconds;
	// atomic, so that a fault set within the store's lock takes no other).
	blockedUntil atomic.Int64
	// refuse is how many reboot requests logind refuses before one is
	// taken; stall how long the machine stays up after the next request
	// it takes (both set by the RebootStall fault).
	refuse atomic.Int32
	stall  atomic.Int64
	// Messages counts the notifications the daemon sent, by kind.
	Messages map[notify.Kind]int
}

// instance is one run of the daemon process.
type instance struct {
	client  *api.Client
	cancel  context.CancelFunc
	done    chan struct{}
	started time.Time
}

// BootID is the current boot's ID, as /proc/sys/kernel/random/boot_id.
func (h *Host) BootID() (string, error) {
	b, _ := h.boot.Load().(string)
	if b == "" {
		return "", fmt.Errorf("host %s is down", h.Name)
	}
	return b, nil
}

func (h *Host) now() time.Time { return time.Now().Add(h.Clock) }

// RebootRequired implements sentinel.Checker.
func (h *Host) RebootRequired(context.Context) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.needed, nil
}

func (h *Host) String() string { return "/run/reboot-required" }

// NeedReboot makes the sentinel say a reboot is needed (a kernel update).
func (h *Host) NeedReboot() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.needed {
		h.needed, h.neededSince = true, time.Now()
	}
}

// register creates the Node as the kubelet does at first boot.
func (h *Host) register() error {
	labels := map[string]string{"kubernetes.io/hostname": h.Name}
	if h.Zone != "" {
		labels[config.ZoneLabel] = h.Zone
	}
	_, err := h.w.store.CreateNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Name, Labels: labels}})
	return err
}

// powerOn boots the machine: a new boot ID, the kubelet, then kured-host.
func (h *Host) powerOn() {
	h.mu.Lock()
	if h.dead || h.up {
		h.mu.Unlock()
		return
	}
	h.epoch++
	h.up = true
	h.shuttingDown = false
	h.needed = false // /run is a tmpfs
	boot := fmt.Sprintf("%s-boot-%d", h.Name, h.epoch)
	h.boot.Store(boot)
	kctx, cancel := context.WithCancel(h.w.ctx)
	h.kubelet = cancel
	h.mu.Unlock()
	h.w.tracef(h.Name, "boots (%s)", boot)
	h.w.goSafe(func() { h.runKubelet(kctx, boot) })
	h.startDaemon()
}

// powerOff stops everything on the machine at once: a reboot, or a crash
// when graceful is false.
func (h *Host) powerOff(graceful bool) {
	h.mu.Lock()
	if !h.up {
		h.mu.Unlock()
		return
	}
	h.up = false
	epoch := h.epoch
	h.boot.Store("")
	d := h.daemon
	h.daemon = nil
	stopKubelet := h.kubelet
	h.mu.Unlock()
	if d != nil {
		d.kill()
	}
	stopKubelet()
	if graceful && h.Graceful {
		_ = h.w.store.UpdateNode(h.Name, api.NodeIdentity(h.Name), func(n *corev1.Node) { setReady(n, corev1.ConditionFalse) })
		return
	}
	// The node controller marks a silent kubelet's Node unknown after
	// its grace period.
	h.w.goSafe(func() {
		if sleep(h.w.ctx, 40*time.Second) != nil {
			return
		}
		h.mu.Lock()
		still := !h.up && h.epoch == epoch
		h.mu.Unlock()
		if still {
			_ = h.w.store.UpdateNode(h.Name, api.Admin, func(n *corev1.Node) { setReady(n, corev1.ConditionUnknown) })
		}
	})
}

// Reboot implements the daemon's Rebooter: the machine goes down a moment
// after the request, and comes back after its down time.
func (h *Host) Reboot(ctx context.Context) error {
	h.mu.Lock()
	if !h.up {
		h.mu.Unlock()
		return fmt.Errorf("host %s is down", h.Name)
	}
	pending := h.shuttingDown
	if !pending && h.refuse.Load() > 0 {
		h.refuse.Add(-1)
		h.mu.Unlock()
		h.w.rebootAsked(h)
		h.w.tracef(h.Name, "logind refuses the reboot (fault)")
		return errors.New("interactive authentication required")
	}
	h.shuttingDown = true
	epoch := h.epoch
	h.mu.Unlock()
	h.w.rebootAsked(h)
	if pending {
		return nil
	}
	down := h.w.draw(h.w.o.DownTime)
	upFor := time.Second
	if s := time.Duration(h.stall.Swap(0)); s > 0 {
		upFor = s
		h.w.tracef(h.Name, "stays up %s after the reboot request (fault)", s.Round(time.Second))
	}
	h.w.goSafe(func() {
		if sleep(h.w.ctx, upFor) != nil {
			return
		}
		h.mu.Lock()
		same := h.epoch == epoch && h.up
		if same {
			h.Planned++
		}
		h.mu.Unlock()
		if !same {
			return
		}
		h.w.tracef(h.Name, "goes down for a reboot (%s)", down.Round(time.Second))
		h.powerOff(true)
		if sleep(h.w.ctx, down) == nil {
			h.powerOn()
		}
	})
	return nil
}

// crashReboot is an unplanned reboot (a kernel panic, a power cut).
func (h *Host) crashReboot(down time.Duration) {
	h.mu.Lock()
	up := h.up
	if up {
		h.Unplanned++
	}
	h.mu.Unlock()
	if !up {
		return
	}
	h.w.tracef(h.Name, "crashes and reboots (fault, %s)", down.Round(time.Second))
	h.powerOff(false)
	if sleep(h.w.ctx, down) == nil {
		h.powerOn()
	}
}

// die takes the machine away for good.
func (h *Host) die() {
	h.w.tracef(h.Name, "dies for good (fault)")
	h.powerOff(false)
	h.mu.Lock()
	h.dead = true
	h.mu.Unlock()
}

func (h *Host) isDead() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dead
}

func setReady(n *corev1.Node, status corev1.ConditionStatus) {
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = status
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: status})
}

// runKubelet reports the boot Ready after the kubelet's delay.
func (h *Host) runKubelet(ctx context.Context, boot string) {
	if sleep(ctx, h.KubeletDelay) != nil {
		return
	}
	err := h.w.store.UpdateNode(h.Name, api.NodeIdentity(h.Name), func(n *corev1.Node) {
		n.Status.NodeInfo.BootID = boot
		setReady(n, corev1.ConditionTrue)
	})
	if err != nil {
		// The Node was deleted: register it again, as a kubelet does.
		if h.register() == nil {
			_ = h.w.store.UpdateNode(h.Name, api.NodeIdentity(h.Name), func(n *corev1.Node) {
				n.Status.NodeInfo.BootID = boot
				setReady(n, corev1.ConditionTrue)
			})
		}
	}
	h.w.tracef(h.Name, "kubelet reports %s Ready", boot)
}

// startDaemon starts kured-host, as systemd does after the kubelet.
func (h *Host) startDaemon() {
	c := h.w.store.Client(api.NodeIdentity(h.Name))
	ctx, cancel := context.WithCancel(h.w.ctx)
	inst := &instance{client: c, cancel: cancel, done: make(chan struct{}), started: time.Now()}
	h.mu.Lock()
	if !h.up {
		h.mu.Unlock()
		cancel()
		return
	}
	h.daemon = inst
	h.mu.Unlock()
	h.w.clients.Add(c)
	log := slog.New(slog.NewTextHandler(h.w.logs.For(h.Name), &slog.HandlerOptions{
		Level: h.w.o.LogLevel,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	cfg := h.Cfg
	watch := &steer.Watch{Client: c.Kube, Metadata: c.Meta, Node: h.Name, Log: log.With("component", "steer")}
	looks := steer.Reader{Client: c.Kube, Node: h.Name, Cached: true, Watch: watch}
	orders, fresh := daemon.Orders(looks), daemon.FreshOrders(steer.Reader{Client: c.Kube, Node: h.Name}, time.Now)
	l := lock.New(lock.Options{
		Client: c.Kube, Metadata: c.Meta, Node: h.Name, Limits: cfg.Lock.Limits(),
		WaitingGrace: cfg.Lock.WaitingGrace.Std(), TTL: cfg.Lock.TTL.Std(),
		AlarmAge: cfg.Lock.AlarmAge.Std(), EnteringAlarmAge: cfg.Lock.EnteringAlarmAge.Std(),
		Now: h.now, ServerNow: time.Now, BootID: h.BootID, Log: log,
		Rand:        rand.New(rand.NewPCG(h.w.rngUint(), h.w.rngUint())),
		MayAnnounce: daemon.MayGo(daemon.WithFresh(orders, fresh)),
		Held:        steer.HoldIn,
		OwnWatched:  watch.OwnNode,
	})
	d := &daemon.Daemon{
		Config: cfg, Log: log, Manager: noNotify{}, Lock: l, Sentinel: h,
		Drainer: &drain.Drainer{Client: c.Kube, Node: h.Name, Log: log.With("component", "drain"), Options: drain.Options{
			GracePeriod: -1, Timeout: cfg.Drain.Timeout.Std(), DeleteEmptyDirData: true, EvictUnreplicated: true,
		}, Observe: l.Observe, Confirm: func(ctx context.Context) error { _, err := l.Confirm(ctx); return err }},
		Rebooter: h,
		BootID:   h.BootID,
		Ready: func() daemon.ReadyWait {
			return &kube.ReadyWatch{Client: c.Kube, Node: h.Name, Boot: h.BootID, Observe: l.Observe}
		},
		Events:  &events.Recorder{Client: c.Kube, Host: h.Name, Now: h.now},
		Node:    h.Name,
		Now:     h.now,
		Metrics: metrics.New(),
		// kured's marks, as the package writes them: patches to the
		// Node that race with the claim's writes.
		Marks: &marks.Marker{Client: c.Kube, Node: h.Name, Annotate: true,
			Pre: map[string]string{"sim.kured-host.dev/rebooting": "true"}, Post: map[string]string{"sim.kured-host.dev/rebooting": "false"},
			Observe: l.Observe},
		Blockers: h.blockers(orders, cfg),
		// The cluster's settings, over this host's configuration: the
		// simulated hosts have no files, so every setting applies.
		Settings:    steer.Reader{Client: c.Kube, Node: h.Name, Cached: true},
		OrdersWatch: watch,
		FreshOrders: fresh,
		Reload: func(cluster string) (config.Config, error) {
			l, err := config.ApplyCluster(h.Cfg, cluster)
			if err != nil {
				return config.Config{}, err
			}
			return l.Config, nil
		},
		BlockersFor: func(c config.Config) []block.Blocker { return h.blockers(orders, c) },
		Messages:    h,
		Watchdog:    3 * time.Minute,
		// Handing back start-up pages is a host's business: here it
		// fails now and then, which the daemon only reports.
		Trim: func() (int64, error) {
			if h.w.chance(0.5) {
				return 0, errors.New("madvise: invalid argument")
			}
			return 4 << 20, nil
		},
	}
	h.w.goSafe(func() {
		defer close(inst.done)
		if err := d.Run(ctx); err != nil && ctx.Err() == nil {
			h.w.tracef(h.Name, "kured-host exits: %v", err)
			// systemd restarts it (Restart=on-failure, RestartSec=10s).
			if sleep(h.w.ctx, 10*time.Second) == nil {
				h.mu.Lock()
				same := h.daemon == inst
				if same {
					h.daemon = nil
				}
				h.mu.Unlock()
				if same {
					c.Sever()
					h.startDaemon()
				}
			}
		}
	})
}

// kill stops a daemon as kill -9 does: its connection is cut, so nothing
// it still has in flight reaches the API.
func (i *instance) kill() {
	i.client.Sever()
	i.cancel()
}

// restartDaemon kills kured-host and starts it again after a pause (a
// crash, kill -9, an OOM kill; systemd restarts it).
func (h *Host) restartDaemon(pause time.Duration) {
	h.stopDaemon(pause, false)
}

// stopDaemon kills the daemon and starts it again after pause; with
// marked, as systemd stops it: the unit's ExecStopPost= (kured-host
// stopped) marks a waiting claim once the daemon is gone.
func (h *Host) stopDaemon(pause time.Duration, marked bool) {
	h.mu.Lock()
	d := h.daemon
	h.daemon = nil
	up := h.up
	h.mu.Unlock()
	if d == nil || !up {
		return
	}
	h.w.tracef(h.Name, "kured-host killed (fault), back in %s", pause.Round(time.Millisecond))
	d.kill()
	if marked {
		c := h.w.store.Client(api.NodeIdentity(h.Name))
		ok, err := lock.MarkStopped(h.w.ctx, c.Kube, h.Name)
		c.Sever()
		h.w.tracef(h.Name, "kured-host stopped (ExecStopPost): waiting claim marked %v, err %v", ok, err)
	}
	if sleep(h.w.ctx, pause) == nil {
		h.mu.Lock()
		up := h.up && h.daemon == nil
		h.mu.Unlock()
		if up {
			h.startDaemon()
		}
	}
}

// Kind and Check make the host a blocker (a maintenance window, an alert,
// a pod that must not go: whatever it is), on while the Blocked fault says.
func (h *Host) Kind() string { return "sim" }

func (h *Host) Check(context.Context) (string, error) {
	if time.Now().UnixNano() < h.blockedUntil.Load() {
		return "blocked for a while (fault)", nil
	}
	return "", nil
}

// blockFor makes the host's blocker say no for d from now.
func (h *Host) blockFor(d time.Duration) { h.blockedUntil.Store(time.Now().Add(d).UnixNano()) }

type noNotify struct{}

func (noNotify) Notify(string) error { return nil }

// Send counts the daemon's notifications (kured's chat messages).
func (h *Host) Send(_ context.Context, kind notify.Kind, _ string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Messages == nil {
		h.Messages = map[notify.Kind]int{}
	}
	h.Messages[kind]++
}

// blockers are the daemon's blockers: the orders, the window when one is
// configured (on the host's clock), and the host's own faults.
func (h *Host) blockers(orders []block.Blocker, c config.Config) []block.Blocker {
	bs := slices.Clone(orders)
	if win := block.NewWindow(c.Window); !win.Always() {
		win.Now = h.now
		bs = append(bs, win)
	}
	return append(bs, h)
}

// messages counts the notifications of kind sent so far.
func (h *Host) messages(kind notify.Kind) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Messages[kind]
}

// planned counts the reboots the daemon asked for so far.
func (h *Host) planned() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Planned
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
