package sim

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/test/sim/api"
)

// orders are the operator's pauses and holds, as the checks need them:
// since when each is in force, and when the last one ended.
type orders struct {
	mu          sync.Mutex
	pausedSince time.Time // zero: not paused
	resumed     time.Time
	heldSince   map[string]time.Time
	unheld      map[string]time.Time
}

// ordersLag is how long after an order is written a node may still act
// as if it had not been: the read right before a step and the step's own
// write are two requests, which another goroutine's write can fall
// between.
const ordersLag = time.Second

// paused reports whether the cluster is paused since more than ordersLag
// at now.
func (o *orders) paused(now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.pausedSince.IsZero() && now.Sub(o.pausedSince) > ordersLag
}

// excused reports whether a waiting node may be idle at now: paused or
// held, or lifted too recently for its next look (the cycle looks again
// after its recheck, a minute here), or the time it started counting
// from then.
func (o *orders) excused(node string, now time.Time) (bool, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.pausedSince.IsZero() || !o.heldSince[node].IsZero() {
		return true, time.Time{}
	}
	return false, maxTime(o.resumed, o.unheld[node]).Add(time.Minute)
}

// pause pauses the cluster for d, as `kured-host pause` or kubectl does,
// then lifts it in one of the ways an operator might: the key removed,
// set to "false", or the object deleted.
func (w *World) pause(d time.Duration) {
	w.setPause(d)
	if sleep(w.ctx, d) == nil {
		w.liftPause()
	}
}

// setPause writes the pause.
func (w *World) setPause(d time.Duration) {
	w.tracef("api", "the operator pauses the cluster for %s", d.Round(time.Second))
	w.editConfigMap(func(data map[string]string) {
		data[steer.KeyPaused], data[steer.KeyPausedBy] = "change freeze", "sim"
		data[steer.KeyPausedSince] = time.Now().UTC().Format(time.RFC3339)
	})
	w.orders.mu.Lock()
	w.orders.pausedSince = time.Now()
	w.orders.mu.Unlock()
}

// liftPause ends the pause.
func (w *World) liftPause() {
	how := []string{"removes the pause", "sets paused to false", "deletes the ConfigMap"}[w.intn(3)]
	w.orders.mu.Lock()
	w.orders.pausedSince, w.orders.resumed = time.Time{}, time.Now()
	w.orders.mu.Unlock()
	switch how {
	case "removes the pause":
		w.editConfigMap(func(data map[string]string) {
			delete(data, steer.KeyPaused)
			delete(data, steer.KeyPausedBy)
			delete(data, steer.KeyPausedSince)
		})
	case "sets paused to false":
		w.editConfigMap(func(data map[string]string) { data[steer.KeyPaused] = "false" })
	default:
		// The cluster's settings go with it.
		w.store.SetConfigMap(steer.Namespace, steer.Name, nil)
	}
	w.tracef("api", "the operator %s: resumed", how)
}

// hold holds h for d with the label and its reason, then lifts it.
func (w *World) hold(h *Host, d time.Duration) {
	err := w.store.UpdateNode(h.Name, api.Admin, func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Labels[steer.HoldLabel] = "freeze"
		n.Annotations[steer.HoldReason] = "a firmware check"
	})
	if err != nil {
		return
	}
	w.orders.mu.Lock()
	w.orders.heldSince[h.Name] = time.Now()
	w.orders.mu.Unlock()
	w.tracef(h.Name, "the operator holds it for %s", d.Round(time.Second))
	w.liftHoldAfter(h, d)
}

// liftHoldAfter lifts h's hold after d.
func (w *World) liftHoldAfter(h *Host, d time.Duration) {
	if sleep(w.ctx, d) != nil {
		return
	}
	w.orders.mu.Lock()
	delete(w.orders.heldSince, h.Name)
	w.orders.unheld[h.Name] = time.Now()
	w.orders.mu.Unlock()
	// Lifted even if the Node was deleted and registered again meanwhile.
	_ = w.store.UpdateNode(h.Name, api.Admin, func(n *corev1.Node) {
		delete(n.Labels, steer.HoldLabel)
		delete(n.Annotations, steer.HoldReason)
	})
	w.tracef(h.Name, "the operator lifts its hold")
}

// checkOrders: no node announces, takes a slot (the commit cordons) or
// starts the cordon of a slot an earlier version took while the cluster
// is paused (past ordersLag), and none takes a slot or starts its cordon
// on a version of its Node that carries the hold label: those writes are
// conditional on that version, which the lock checks (lock.Options.Held),
// so there is no lag to allow. An announce while held is allowed: the
// looks before it read the hold from a watch, which may lag, and the
// commit after it refuses. It runs inside the store's critical section:
// it must not call the store.
func (w *World) checkOrders(r api.Revision, prev *corev1.Node) {
	n := r.Node
	if r.Deleted || prev == nil || r.By != api.NodeIdentity(n.Name) {
		return
	}
	c, err := claim.Parse(n.Labels[claim.Label], n.Annotations[claim.Annotation])
	was, perr := claim.Parse(prev.Labels[claim.Label], prev.Annotations[claim.Annotation])
	if err != nil || perr != nil {
		return
	}
	_, held := prev.Labels[steer.HoldLabel]
	var step string
	switch {
	case was.State == claim.Waiting && c.State == claim.Entering:
		step, held = "announced", false
	case was.State == claim.Entering && c.State == claim.Holding:
		step = "took a slot"
	case was.State == claim.Holding && was.Phase == claim.PhaseAcquired && (c.Phase == claim.PhaseCordoned || c.Phase == claim.PhaseDraining):
		// The cordon's write records draining when no drain.delay
		// comes between.
		step = "started its cordon"
	default:
		return
	}
	if held {
		w.violate("%s %s on a version of its Node that is held", n.Name, step)
	}
	// The pause is read fresh before the announce and the commit (the
	// cordon); only a commit of an earlier version's, which cordoned in
	// a write of its own, did not look.
	if (step != "took a slot" || c.Phase != claim.PhaseAcquired) && w.orders.paused(r.At) {
		w.violate("%s %s while paused", n.Name, step)
	}
}

// changeSettings is the operator changing the cluster's settings mid-roll:
// the concurrency up or down, the limit per zone, or a setting the nodes
// must refuse (a bad value, a host's key), which must change nothing.
func (w *World) changeSettings() {
	var text, what string
	switch w.intn(4) {
	case 0:
		text, what = "[lock]\nconcurrency = 0\n", "a bad concurrency (0)"
	case 1:
		text, what = "[sentinel]\nperiod = \"1s\"\n", "a host's key (sentinel.period)"
	default:
		c := 1 + w.intn(3)
		text, what = fmt.Sprintf("[lock]\nconcurrency = %d\n", c), fmt.Sprintf("concurrency %d", c)
		if w.o.Zones > 0 {
			z := 1 + w.intn(2)
			text += fmt.Sprintf("[[lock.groups]]\nlabel = %q\nmax = %d\n", config.ZoneLabel, z)
			what += fmt.Sprintf(", %d per zone", z)
		}
	}
	w.editConfigMap(func(data map[string]string) { data[steer.KeySettings] = text })
	w.tracef("api", "the operator sets the cluster's settings: %s", what)
}

// editConfigMap changes keys of kube-system/kured-host, keeping the
// others, as kubectl patch does.
func (w *World) editConfigMap(change func(map[string]string)) {
	w.store.EditConfigMap(steer.Namespace, steer.Name, func(data map[string]string) {
		change(data)
		if data[steer.KeySettings] != "" {
			w.settingsSet.Store(true)
		}
	})
}
