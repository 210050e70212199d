package sim

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/test/sim/api"
)

// errOutage is what every request gets while the API server is away.
var errOutage = errors.New("connect: connection refused (API server down)")

// window is when faults happen: while the roll is likely under way.
func (w *World) window() time.Duration {
	return time.Duration(w.o.Nodes/max(w.o.Concurrency, 1)+2) * 4 * time.Minute
}

// at runs f at a random time in the fault window.
func (w *World) at(f func()) {
	when := w.draw(Span{0, w.window()})
	w.goSafe(func() {
		if sleep(w.ctx, when) == nil {
			f()
		}
	})
}

func (w *World) randomHost() *Host { return w.Hosts[w.intn(len(w.Hosts))] }

// startFaults arms the faults of the run.
func (w *World) startFaults() {
	f := w.o.Faults
	if f.LostReply {
		w.store.Faults.LoseReply = func(r api.Request) bool { return r.Who != api.Admin && w.chance(0.05) }
	}
	if f.Outage {
		n := 1 + w.intn(3)
		for range n {
			w.at(func() {
				d := w.draw(Span{5 * time.Second, 90 * time.Second})
				w.tracef("api", "outage for %s (fault)", d.Round(time.Second))
				w.mu.Lock()
				w.outageUntil = time.Now().Add(d)
				w.mu.Unlock()
				w.store.EndWatches("")
			})
		}
		w.store.Faults.Before = func(r api.Request) error {
			if r.Who == api.Admin {
				return nil
			}
			w.mu.Lock()
			down := time.Now().Before(w.outageUntil)
			w.mu.Unlock()
			if down {
				return errOutage
			}
			return nil
		}
	}
	if f.WatchLag {
		lag, cache := w.draw(Span{0, 3 * time.Second}), w.draw(Span{0, 5 * time.Second})
		w.store.Faults.WatchLag = func(api.Request) time.Duration { return lag }
		w.store.Faults.CacheLag = func(api.Request) time.Duration { return cache }
	}
	if f.WatchEnd {
		for range 2 + w.intn(4) {
			w.at(func() {
				if w.chance(0.5) {
					w.tracef("api", "history compacted (fault): resumed watches get 410")
					w.store.ExpireHistory()
				}
				w.tracef("api", "every watch ends (fault)")
				w.store.EndWatches("")
			})
		}
	}
	if f.Crash {
		for range 1 + w.intn(2*w.o.Nodes) {
			// Half as systemd stops it (ExecStopPost= marks a waiting
			// claim), half as a hang or a crash whose mark failed.
			w.at(func() {
				w.randomHost().stopDaemon(w.draw(Span{100 * time.Millisecond, 15 * time.Second}), w.chance(0.5))
			})
		}
	}
	if f.AdminEdits {
		for range 1 + w.intn(3) {
			w.at(w.adminEdit)
		}
		w.interpose(1 + w.intn(2))
	}
	if f.NodeDelete {
		w.at(func() {
			h := w.randomHost()
			w.tracef(h.Name, "the admin deletes the Node (fault)")
			if w.store.DeleteNode(h.Name) != nil {
				return
			}
			// The kubelet registers it again.
			if sleep(w.ctx, w.draw(Span{5 * time.Second, time.Minute})) == nil {
				if boot, err := h.BootID(); err == nil && h.register() == nil {
					_ = w.store.UpdateNode(h.Name, api.NodeIdentity(h.Name), func(n *corev1.Node) {
						n.Status.NodeInfo.BootID = boot
						setReady(n, corev1.ConditionTrue)
					})
				}
			}
		})
	}
	if f.Relabel && w.o.Zones > 1 {
		// A node with an active claim is left alone: relabelling one can
		// exceed a group limit in label terms, as docs/claims.md says
		// (its claim is then not believed by the others, which the
		// harness's forged-claim test covers).
		w.at(func() {
			h := w.randomHost()
			zone := string(rune('a' + w.intn(w.o.Zones)))
			err := w.store.UpdateNode(h.Name, api.Admin, func(n *corev1.Node) {
				if !claim.State(n.Labels[claim.Label]).Active() {
					n.Labels[config.ZoneLabel] = "zone-" + zone
				}
			})
			if err == nil {
				w.tracef(h.Name, "the admin moves it to zone-%s unless it holds (fault)", zone)
			}
		})
	}
	if f.Unplanned {
		for range 1 + w.intn(3) {
			w.at(func() { w.randomHost().crashReboot(w.draw(w.o.DownTime)) })
		}
	}
	if f.Death {
		w.at(func() { w.randomHost().die() })
	}
	if f.Blocked {
		for range 1 + w.intn(3) {
			w.at(func() {
				h, d := w.randomHost(), w.draw(Span{30 * time.Second, 10 * time.Minute})
				w.tracef(h.Name, "a blocker says no for %s (fault)", d.Round(time.Second))
				h.blockFor(d)
			})
		}
	}
	if f.RebootStall {
		// logind refuses (a polkit rule, a busy shutdown) or the machine
		// hangs on its way down (a stuck unit): the daemon asks again,
		// after the step's back-off or after reboot.timeout (15 min),
		// and keeps its slot meanwhile.
		for range 1 + w.intn(2) {
			h := w.randomHost()
			if w.chance(0.5) {
				n := 1 + w.intn(3)
				h.refuse.Add(int32(n))
				w.tracef(h.Name, "logind will refuse its next %d reboot request(s) (fault)", n)
			} else {
				d := w.draw(Span{16 * time.Minute, 25 * time.Minute})
				h.stall.Store(int64(d))
				w.tracef(h.Name, "its next reboot will hang for %s (fault)", d.Round(time.Second))
			}
		}
	}
	if f.Orders {
		w.at(func() { w.pause(w.draw(Span{time.Minute, 12 * time.Minute})) })
		for range 1 + w.intn(2) {
			w.at(func() { w.hold(w.randomHost(), w.draw(Span{time.Minute, 12 * time.Minute})) })
		}
	}
	if f.Settings {
		for range 1 + w.intn(3) {
			w.at(w.changeSettings)
		}
	}
	if f.StuckBudget && w.o.PodsPerNode > 0 {
		// Longer than drain.timeout (10 min): the drain gives up, the node
		// is put back and tries again later.
		w.at(func() {
			app := fmt.Sprintf("app-%d", w.intn(max(w.o.Nodes/2, 1)))
			d := w.draw(Span{11 * time.Minute, 20 * time.Minute})
			w.tracef("api", "the budget of %s refuses every eviction for %s (fault)", app, d.Round(time.Second))
			w.mu.Lock()
			w.stuck[app] = time.Now().Add(d)
			w.mu.Unlock()
		})
	}
}

// interpose arms up to n admin edits in the narrowest windows, right
// after a node's own write: its label set back to waiting just after it
// announced (before its verify), or its claim removed just after it
// recorded a phase (before the cordon, the drain or the reboot that
// phase is about).
func (w *World) interpose(n int) {
	left := n
	w.store.Faults.Interpose = func(r api.Revision) func(*corev1.Node) {
		c, err := claim.Parse(r.Node.Labels[claim.Label], r.Node.Annotations[claim.Annotation])
		if err != nil || left == 0 || !w.chance(0.05) {
			return nil
		}
		name := r.Node.Name
		switch {
		case c.State == claim.Entering:
			left--
			w.tracef(name, "the admin sets the label alone back to waiting, just after it announced (fault)")
			return func(n *corev1.Node) { n.Labels[claim.Label] = string(claim.Waiting) }
		case c.State == claim.Holding && (c.Phase == claim.PhaseCordoned || c.Phase == claim.PhaseDraining || c.Phase == claim.PhaseDrained):
			left--
			w.tracef(name, "the admin removes the claim, just after it recorded %s (fault)", c.Phase)
			return removeClaim
		}
		return nil
	}
}

// adminEdit is something an admin does to a claim by hand: remove it,
// change its label alone, or leave an annotation this build cannot read
// (garbage, a future version), or forge its times an hour ahead (as a
// compromised node would, to hold a slot with no alarm), or make it
// publish more group rules than a claim may (17, or 5,000 as a
// compromised node would, to cost every reader its CPU). A claim the
// daemons cannot read or do not believe counts as holding until it is
// fixed: the admin removes it again a while later, as the UnreadableClaim
// alarm says to.
func (w *World) adminEdit() {
	h := w.randomHost()
	n := w.store.Node(h.Name)
	if n == nil || n.Labels[claim.Label] == "" {
		return
	}
	edit := w.intn(6)
	var what string
	err := w.store.UpdateNode(h.Name, api.Admin, func(n *corev1.Node) {
		switch edit {
		case 0:
			what = "removes the claim"
			removeClaim(n)
		case 1:
			states := []claim.State{claim.Waiting, claim.Entering, claim.Holding}
			to := states[w.intn(len(states))]
			what = "sets the claim's label alone to " + string(to)
			n.Labels[claim.Label] = string(to)
		case 2:
			what = "writes a garbage claim annotation"
			n.Annotations[claim.Annotation] = "{not json"
		case 3:
			what = "writes a claim of a future version"
			n.Annotations[claim.Annotation] = `{"v":2,"state":"holding"}`
		case 4:
			if forgeTimes(n) {
				what = "forges the claim's times an hour ahead"
			}
		case 5:
			rules := claim.MaxGroupRules + 1
			if w.intn(4) == 0 {
				rules = 5000
			}
			if addRules(n, rules) {
				what = fmt.Sprintf("makes the claim publish %d group rules", rules)
			}
		}
	})
	if err != nil || what == "" {
		return
	}
	w.tracef(h.Name, "the admin %s (fault)", what)
	if edit == 0 || sleep(w.ctx, w.draw(Span{2 * time.Minute, 10 * time.Minute})) != nil {
		return
	}
	// A claim left unreadable (a label that disagrees with its annotation,
	// garbage, a future version, too many rules) or not believed (times ahead) raises an
	// alarm; the admin removes it.
	fixed := false
	_ = w.store.UpdateNode(h.Name, api.Admin, func(n *corev1.Node) {
		lv, ann := n.Labels[claim.Label], n.Annotations[claim.Annotation]
		c, err := claim.Parse(lv, ann)
		if (err != nil && (lv != "" || ann != "")) || (err == nil && c.Updated.After(time.Now().Add(time.Minute))) {
			removeClaim(n)
			fixed = true
		}
	})
	if fixed {
		w.tracef(h.Name, "the admin removes the claim left unreadable")
	}
}

// removeClaim is an admin's removal of a claim: label and annotation.
// forgeTimes sets the claim's times an hour ahead, as a compromised node
// or a careless script might; it reports whether there was a claim to
// forge.
func forgeTimes(n *corev1.Node) bool {
	c, err := claim.Parse(n.Labels[claim.Label], n.Annotations[claim.Annotation])
	if err != nil {
		return false
	}
	c.Updated = time.Now().Add(time.Hour)
	if c.Acquired != nil {
		c.Acquired = &c.Updated
	}
	s, err := c.Marshal()
	if err != nil {
		return false
	}
	n.Annotations[claim.Annotation] = s
	return true
}

// addRules adds rules group rules to the claim, on labels no node has; it
// reports whether there was a claim to add them to.
func addRules(n *corev1.Node, rules int) bool {
	c, err := claim.Parse(n.Labels[claim.Label], n.Annotations[claim.Annotation])
	if err != nil {
		return false
	}
	for i := range rules {
		c.Limits.Groups = append(c.Limits.Groups, claim.GroupLimit{Label: fmt.Sprintf("rule-%d", i), Max: 1})
	}
	s, err := c.Marshal()
	if err != nil {
		return false
	}
	n.Annotations[claim.Annotation] = s
	return true
}

func removeClaim(n *corev1.Node) {
	delete(n.Labels, claim.Label)
	delete(n.Annotations, claim.Annotation)
}
