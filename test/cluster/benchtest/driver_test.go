package benchtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/test/cluster"
)

// lockDriver is the reboot cycle around the slot lock as the daemon runs
// it (the same steps as locktest's driver, without its fault injection):
// join when the sentinel appears, acquire, cordon (recording
// whether the node was schedulable), "drain" (hold), record the boot ID
// and ask the host to reboot; after the boot, uncordon and release. Every
// request goes through client, with the node's own identity.
type lockDriver struct {
	h      *cluster.SimHost
	client kubernetes.Interface
	meta   metadata.Interface
	limits claim.Limits
	hold   time.Duration
	// started is called each time the daemon has started (watch cache
	// filled, own claim read).
	started func()
}

func (d *lockDriver) bootID() (string, error) {
	b, err := os.ReadFile(filepath.Join(d.h.Root, cluster.BootIDPath))
	return strings.TrimSpace(string(b)), err
}

// log is the lock's logger: nowhere, or stderr with BENCH_LOG=1.
func (d *lockDriver) log() *slog.Logger {
	if os.Getenv("BENCH_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", d.h.Name)
}

func (d *lockDriver) run(ctx context.Context) error {
	l := lock.New(lock.Options{
		Client: d.client, Metadata: d.meta, Node: d.h.Name, Limits: d.limits,
		// The daemon's defaults (config.toml.example).
		WaitingGrace: 2 * time.Minute, AlarmAge: time.Hour, EnteringAlarmAge: 10 * time.Minute,
		BootID: d.bootID, Log: d.log(),
	})
	if err := l.Start(ctx); err != nil {
		return err
	}
	if _, _, err := l.Own(ctx); err != nil {
		return err
	}
	d.started()
	for ctx.Err() == nil {
		c, state := l.Known()
		switch state {
		case "":
			if err := d.h.AwaitRebootRequired(ctx); err != nil {
				return err
			}
			if err := l.Join(ctx, marks.Change{}); err != nil {
				return err
			}
		case claim.Waiting, claim.Entering:
			if _, err := l.Acquire(ctx, lock.Take{}); err != nil && !errors.Is(err, lock.ErrLost) && !errors.Is(err, lock.ErrNotJoined) {
				return err
			}
		case claim.Holding:
			if err := d.hold1(ctx, l, c); err != nil {
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

// hold1 does the holder's work: before the reboot, cordon, drain and ask
// for the reboot; after it, uncordon and release.
func (d *lockDriver) hold1(ctx context.Context, l *lock.Lock, c claim.Claim) error {
	boot, err := d.bootID()
	if err != nil {
		return err
	}
	if c.BootID != boot {
		if !c.WasUnschedulable {
			// In the release's own write, as the daemon's cycle does.
			return l.ReleaseUncordoned(ctx, marks.Change{})
		}
		return l.Release(ctx)
	}
	// The commit cordoned the node (lock.Take); the claim writes are
	// conditional, so each confirms the claim.
	if err := sleep(ctx, d.hold); err != nil {
		return err
	}
	if _, err := l.Update(ctx, func(c *claim.Claim) { c.Phase, c.BootID = claim.PhaseRebooting, boot }); err != nil {
		return err
	}
	return reboot(ctx, d.h)
}

// reboot reboots the host, as logind would be asked to, and waits for the
// reboot to stop this daemon. (Straight to SimHost.Reboot rather than
// through RebootCommand, which the harness polls for every 25 ms.)
func reboot(ctx context.Context, h *cluster.SimHost) error {
	go func() {
		if err := h.Reboot(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "reboot %s: %v\n", h.Name, err)
		}
	}()
	<-ctx.Done()
	return ctx.Err()
}

// setUnschedulable cordons or uncordons, for the kured-style driver (the
// slot lock's driver cordons and uncordons in its claim writes, as the
// daemon does).
func setUnschedulable(ctx context.Context, client kubernetes.Interface, node string, on bool) (*corev1.Node, error) {
	body := `{"spec":{"unschedulable":null}}`
	if on {
		body = `{"spec":{"unschedulable":true}}`
	}
	return client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
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
