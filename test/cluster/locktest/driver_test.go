// Package locktest runs the slot lock (daemon/lock) on simulated hosts
// against the real API server, with the auditor checking every revision.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kured-host/kured-host/daemon/alarm"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/events"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/metrics"
	"github.com/kured-host/kured-host/test/cluster"
)

var cp *cluster.ControlPlane

func TestMain(m *testing.M) {
	var err error
	opts := cluster.Options{}
	if os.Getenv("CLUSTER_LOG") != "" {
		opts.Log = os.Stderr
	}
	cp, err = cluster.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cp.Stop()
	os.Exit(code)
}

const zoneLabel = "topology.kubernetes.io/zone"

// driver is a minimal reboot cycle around the lock, as the daemon runs it:
// join when the sentinel appears, acquire, cordon (recording whether the
// node was schedulable), "drain" (wait), record the boot ID and ask the
// host to reboot; after the boot, uncordon if it cordoned and release. A
// crash at any point (the service is killed) resumes from the claim.
type driver struct {
	h      *cluster.SimHost
	client kubernetes.Interface // for the lock; h.Client when nil
	// wrap, when client is nil, wraps the transport of the lock's clients.
	wrap   func(http.RoundTripper) http.RoundTripper
	limits claim.Limits
	grace  time.Duration
	// pace is a delay before each step (random in stress tests).
	pace func() time.Duration
	// hold is how long the "drain" takes.
	hold time.Duration
	// releaseDelay is lock.release_delay.
	releaseDelay time.Duration
	alarms       chan claim.Alarm
	metrics      *metrics.Metrics
	log          *slog.Logger
	onStart      func(l *lock.Lock)
}

// chanReport is the daemon's alarm report (Event, metric) that also tells
// the test.
type chanReport struct {
	*alarm.Report
	ch chan claim.Alarm
}

func (c chanReport) Raise(ctx context.Context, a claim.Alarm) {
	c.Report.Raise(ctx, a)
	if c.ch != nil {
		select {
		case c.ch <- a:
		default:
		}
	}
}

func (d *driver) sleep(ctx context.Context, t time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(t):
		return nil
	}
}

func (d *driver) step(ctx context.Context) error {
	if d.pace == nil {
		return ctx.Err()
	}
	return d.sleep(ctx, d.pace())
}

func (d *driver) bootID() (string, error) {
	b, err := os.ReadFile(filepath.Join(d.h.Root, cluster.BootIDPath))
	return strings.TrimSpace(string(b)), err
}

// hostClients are host h's clients, their requests passed through wrap
// (nil: h's own client, unwrapped).
func hostClients(h *cluster.SimHost, wrap func(http.RoundTripper) http.RoundTripper) (kubernetes.Interface, metadata.Interface, error) {
	cfg, client := h.Config, h.Client
	if wrap != nil {
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(wrap)
		var err error
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, nil, err
		}
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return client, meta, nil
}

func (d *driver) run(ctx context.Context) error {
	client := d.client
	var meta metadata.Interface
	if client == nil {
		var err error
		if client, meta, err = hostClients(d.h, d.wrap); err != nil {
			return err
		}
	}
	l := lock.New(lock.Options{
		Client: client, Metadata: meta, Node: d.h.Name, Limits: d.limits,
		WaitingGrace: d.grace, AlarmAge: time.Hour, EnteringAlarmAge: 2 * time.Second,
		BootID: d.bootID, Log: d.log,
		Alarms: chanReport{Report: &alarm.Report{
			Events:  &events.Recorder{Client: client, Host: d.h.Name},
			Metrics: d.metrics,
		}, ch: d.alarms},
	})
	if err := l.Start(ctx); err != nil {
		return err
	}
	if d.onStart != nil {
		d.onStart(l)
	}
	if _, _, err := l.Own(ctx); err != nil {
		return err
	}
	for ctx.Err() == nil {
		c, state := l.Known()
		switch state {
		case "":
			if err := d.h.AwaitRebootRequired(ctx); err != nil {
				return err
			}
			if err := d.step(ctx); err != nil {
				return err
			}
			if err := l.Join(ctx, marks.Change{}); err != nil {
				return err
			}
		case claim.Waiting, claim.Entering:
			if err := d.step(ctx); err != nil {
				return err
			}
			if _, err := l.Acquire(ctx, lock.Take{}); err != nil && !errors.Is(err, lock.ErrLost) && !errors.Is(err, lock.ErrNotJoined) {
				return err
			}
		case claim.Holding:
			err := d.hold1(ctx, l, c)
			if errors.Is(err, lock.ErrLost) {
				// The claim went away before the reboot: put the node
				// back as it was and start over.
				if !c.WasUnschedulable && c.Phase != claim.PhaseAcquired {
					if err := d.setUnschedulable(ctx, l, false); err != nil {
						return err
					}
				}
				if _, _, err := l.Own(ctx); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
		default:
			if _, _, err := l.Own(ctx); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// hold1 does the holder's work for one visit: before the reboot, cordon,
// drain and ask for the reboot; after it, uncordon and release.
func (d *driver) hold1(ctx context.Context, l *lock.Lock, c claim.Claim) error {
	boot, err := d.bootID()
	if err != nil {
		return err
	}
	if c.BootID != boot {
		if err := d.step(ctx); err != nil {
			return err
		}
		if !c.WasUnschedulable && d.releaseDelay <= 0 {
			// In the release's own write, as the daemon's cycle does.
			return l.ReleaseUncordoned(ctx, marks.Change{})
		}
		if !c.WasUnschedulable {
			if err := d.setUnschedulable(ctx, l, false); err != nil {
				return err
			}
		}
		if err := d.step(ctx); err != nil {
			return err
		}
		return l.ReleaseAfter(ctx, d.releaseDelay)
	}
	if err := d.step(ctx); err != nil {
		return err
	}
	// The commit cordoned the node (lock.Take); the claim writes are
	// conditional, so each confirms the claim.
	if err := d.sleep(ctx, d.hold); err != nil {
		return err
	}
	if _, err := l.Update(ctx, func(c *claim.Claim) { c.Phase, c.BootID = claim.PhaseRebooting, boot }); err != nil {
		return err
	}
	cmd := d.h.RebootCommand()
	if out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("reboot: %v %s", err, out)
	}
	<-ctx.Done() // the reboot stops this daemon
	return ctx.Err()
}

// setUnschedulable cordons or uncordons, and gives the lock the Node as
// the patch left it, as the daemon's drainer does.
func (d *driver) setUnschedulable(ctx context.Context, l *lock.Lock, on bool) error {
	body := `{"spec":{"unschedulable":null}}`
	if on {
		body = `{"spec":{"unschedulable":true}}`
	}
	n, err := d.h.Client.CoreV1().Nodes().Patch(ctx, d.h.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	if err == nil {
		l.Observe(n)
	}
	return err
}

// fleet is a test's hosts, each running a driver as the "kured-host"
// service.
type fleet struct {
	t     *testing.T
	hosts []*cluster.SimHost
	a     *cluster.Auditor
}

type hostSpec struct {
	name   string
	zone   string
	limits claim.Limits
	hold   time.Duration
	pace   func() time.Duration
	grace  time.Duration
	alarms chan claim.Alarm
	idle   bool // no driver
	// releaseDelay is lock.release_delay.
	releaseDelay time.Duration
	metrics      *metrics.Metrics
	wrap         func(http.RoundTripper) http.RoundTripper
}

func newFleet(t *testing.T, ctx context.Context, specs []hostSpec) *fleet {
	t.Helper()
	f := &fleet{t: t}
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	f.a = a
	names := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(specs))
	for _, s := range specs {
		names[s.name] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			labels := map[string]string{}
			if s.zone != "" {
				labels[zoneLabel] = s.zone
			}
			h, err := cp.AddHost(ctx, cluster.HostOptions{Name: s.name, Labels: labels, DownTime: 150 * time.Millisecond})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			f.hosts = append(f.hosts, h)
			mu.Unlock()
			if s.idle {
				return
			}
			d := &driver{h: h, limits: s.limits, grace: s.grace, pace: s.pace, hold: s.hold, alarms: s.alarms,
				releaseDelay: s.releaseDelay, metrics: s.metrics, wrap: s.wrap, log: slog.New(slog.DiscardHandler)}
			if os.Getenv("DRIVER_LOG") != "" {
				d.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", s.name)
			}
			h.AddService("kured-host", d.run)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, h := range f.hosts {
		t.Cleanup(func() { cp.RemoveHost(context.Background(), h) })
	}
	a.Scope = func(n string) bool { return names[n] }
	return f
}

func (f *fleet) host(name string) *cluster.SimHost {
	for _, h := range f.hosts {
		if h.Name == name {
			return h
		}
	}
	f.t.Fatalf("no host %s", name)
	return nil
}

// rebootAll sets every host's sentinel.
func (f *fleet) rebootAll() {
	for _, h := range f.hosts {
		if err := h.SetRebootRequired(true); err != nil {
			f.t.Fatal(err)
		}
	}
}

// waitDone waits until every given host has booted boots times and no
// claim is left on any of them.
func (f *fleet) waitDone(ctx context.Context, hosts []*cluster.SimHost, boots int) {
	f.t.Helper()
	for {
		ok := true
		for _, h := range hosts {
			if h.Boots() < boots {
				ok = false
				break
			}
			n, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
			if err != nil {
				f.t.Fatal(err)
			}
			if _, has := n.Labels[claim.Label]; has {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			f.t.Fatalf("hosts did not finish: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// check syncs the auditor and runs every invariant check.
func (f *fleet) check(ctx context.Context, limits claim.Limits) {
	f.t.Helper()
	if err := f.a.Sync(ctx); err != nil {
		f.t.Fatal(err)
	}
	if err := f.a.Check(limits); err != nil {
		f.t.Error(err)
	}
}

func uniformPace(r *rand.Rand, mu *sync.Mutex, max time.Duration) func() time.Duration {
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(r.Int64N(int64(max)))
	}
}
