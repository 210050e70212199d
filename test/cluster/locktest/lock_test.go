package locktest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kured-host/kured-host/daemon/alarm"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/metrics"
	"github.com/kured-host/kured-host/daemon/queue"
	"github.com/kured-host/kured-host/test/cluster"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func limits(conc, zoneMax int) claim.Limits {
	l := claim.Limits{Concurrency: conc}
	if zoneMax > 0 {
		l.Groups = []claim.GroupLimit{{Label: zoneLabel, Max: zoneMax}}
	}
	return l
}

// TestSeedScenario is the kured pull request's scenario: eight nodes,
// concurrency 2, every node needing a reboot at once. Never more than two
// hold a slot, each node holds exactly once, and the slots go in queue
// order: (since, name).
func TestSeedScenario(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	var specs []hostSpec
	for i := range 8 {
		specs = append(specs, hostSpec{name: fmt.Sprintf("aks-nodepool1-14327021-vmss%06d", i), limits: limits(2, 1), hold: 300 * time.Millisecond})
	}
	f := newFleet(t, ctx, specs)
	f.rebootAll()
	f.waitDone(ctx, f.hosts, 2)
	f.check(ctx, limits(2, 0))

	acq := f.a.Acquisitions()
	perNode := map[string]int{}
	for _, a := range acq {
		perNode[a.Node]++
		if !a.ReleasedOK || a.BootLeft == a.BootHeld {
			t.Errorf("%s: released %v, boot %s -> %s", a.Node, a.ReleasedOK, a.BootHeld, a.BootLeft)
		}
	}
	for _, h := range f.hosts {
		if perNode[h.Name] != 1 || h.Boots() != 2 {
			t.Errorf("%s held %d time(s) and booted %d time(s), want 1 and 2", h.Name, perNode[h.Name], h.Boots())
		}
	}
	if most, _ := f.a.MaxHolders(""); most != 2 {
		t.Errorf("at most %d held at once, want 2 (the limit, used)", most)
	}
	// Hand-offs in (since, name) order: once slots are being handed off
	// (after the first release; the first ones go to whoever joined and
	// announced first in the same instant), no node takes a slot while a
	// node ahead of it in the queue is still waiting.
	firstRelease := acq[0].Released.RV
	for _, a := range acq {
		firstRelease = min(firstRelease, a.Released.RV)
	}
	state := map[string]cluster.NodeState{}
	for _, s := range f.a.History() {
		prev := state[s.Node]
		state[s.Node] = s
		if s.RV <= firstRelease || !s.Holding() || prev.Holding() {
			continue
		}
		for _, o := range state {
			if o.ClaimLabel == string(claim.Waiting) && queuedBefore(o, s) {
				t.Errorf("%s took a slot at revision %d while %s, ahead of it in the queue, was waiting", s.Node, s.RV, o.Node)
			}
		}
	}
}

func queuedBefore(a, b cluster.NodeState) bool {
	if !a.Claim.Since.Equal(b.Claim.Since) {
		return a.Claim.Since.Before(b.Claim.Since)
	}
	return a.Node < b.Node
}

// TestZones: six nodes in three zones, concurrency 2, one per zone.
func TestZones(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	var specs []hostSpec
	for i := range 6 {
		specs = append(specs, hostSpec{name: fmt.Sprintf("zones-%d", i), zone: fmt.Sprintf("zone-%c", 'a'+i%3), limits: limits(2, 1), hold: 300 * time.Millisecond})
	}
	f := newFleet(t, ctx, specs)
	f.rebootAll()
	f.waitDone(ctx, f.hosts, 2)
	f.check(ctx, limits(2, 1))
	if cluster, zone := f.a.MaxHolders(zoneLabel); cluster != 2 || zone != 1 {
		t.Errorf("most holders at once: %d in the cluster, %d in a zone; want 2 and 1", cluster, zone)
	}
}

// TestSkipOver: nine nodes in three zones, concurrency 3, one per zone;
// zone a's first holder takes long. The other zones keep going meanwhile.
func TestSkipOver(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	var specs []hostSpec
	for i := range 9 {
		s := hostSpec{name: fmt.Sprintf("skip-%c%d", 'a'+i%3, i/3), zone: fmt.Sprintf("zone-%c", 'a'+i%3), limits: limits(3, 1), hold: 200 * time.Millisecond}
		if i == 0 {
			s.hold = 6 * time.Second // zone a is blocked by its first node
		}
		specs = append(specs, s)
	}
	f := newFleet(t, ctx, specs)
	// skip-a0 goes first and holds zone a for 6 s; then everyone else.
	if err := f.host("skip-a0").SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitHolding(t, ctx, "skip-a0", true)
	f.rebootAll()
	f.waitDone(ctx, f.hosts, 2)
	f.check(ctx, limits(3, 1))
	var slow cluster.Acquisition
	for _, a := range f.a.Acquisitions() {
		if a.Node == "skip-a0" {
			slow = a
		}
	}
	doneMeanwhile := 0
	for _, a := range f.a.Acquisitions() {
		if !strings.HasPrefix(a.Node, "skip-a") && a.Released.RV < slow.Released.RV {
			doneMeanwhile++
		}
	}
	// All six nodes of zones b and c go while zone a is blocked.
	if doneMeanwhile != 6 {
		t.Errorf("%d of the 6 nodes of zones b and c rebooted while zone a was blocked", doneMeanwhile)
	}
}

// TestMixedConfiguration: nodes configured with concurrency 3 and others
// with 1 (a roll-out of a configuration change). While a concurrency-1
// claim is active nobody else holds: every holder's published limit holds.
func TestMixedConfiguration(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	var specs []hostSpec
	for i := range 6 {
		conc := 3
		if i%3 == 0 {
			conc = 1
		}
		specs = append(specs, hostSpec{name: fmt.Sprintf("mixed-%d", i), limits: limits(conc, 0), hold: 300 * time.Millisecond})
	}
	f := newFleet(t, ctx, specs)
	// The concurrency-1 nodes join first: while their claims wait or
	// hold, their limit binds every node (waiting claimants' limits
	// bind); once they are done, the concurrency-3 nodes overlap.
	for _, name := range []string{"mixed-0", "mixed-3"} {
		if err := f.host(name).SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	cluster.WaitFor(t, ctx, "the concurrency-1 nodes in the queue", 20*time.Millisecond, func() bool {
		for _, name := range []string{"mixed-0", "mixed-3"} {
			if st, _, _ := cp.ClaimOf(t, ctx, name); st == "" && f.host(name).Boots() < 2 {
				return false
			}
		}
		return true
	})
	f.rebootAll()
	f.waitDone(ctx, f.hosts, 2)
	f.check(ctx, limits(3, 0)) // includes CheckPublishedLimits
	if most, _ := f.a.MaxHolders(""); most < 2 {
		t.Errorf("at most %d held at once: the concurrency-3 nodes should have overlapped", most)
	}
}

// TestStress: 30 nodes over 3 zones, concurrency 3, one per zone, random
// delays before every step, random daemon crashes (the service is killed
// and restarted, resuming from its claim), and nodes asking for new
// reboots, until several hundred slots have been taken. The auditor must
// find nothing. The seed is printed; KURED_HOST_STRESS_SEED replays one.
func TestStress(t *testing.T) {
	seeds := []uint64{1, 2}
	if s := os.Getenv("KURED_HOST_STRESS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{v}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { stress(t, seed, 30, 300) })
	}
}

func stress(t *testing.T, seed uint64, nodes, want int) {
	t.Logf("seed %d (replay with KURED_HOST_STRESS_SEED=%d)", seed, seed)
	ctx := ctxFor(t, 8*time.Minute)
	r := rand.New(rand.NewPCG(seed, seed))
	var mu sync.Mutex
	pace := uniformPace(r, &mu, 60*time.Millisecond)
	var specs []hostSpec
	for i := range nodes {
		specs = append(specs, hostSpec{name: fmt.Sprintf("s%d-%02d", seed, i), zone: fmt.Sprintf("zone-%c", 'a'+i%3),
			limits: limits(3, 1), hold: 20 * time.Millisecond, pace: pace, grace: 5 * time.Second})
	}
	f := newFleet(t, ctx, specs)
	f.rebootAll()
	crashes := 0
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		acq := f.a.Acquisitions()
		if len(acq) >= want {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d acquisitions", len(acq))
		case <-tick.C:
		}
		mu.Lock()
		h := f.hosts[r.IntN(len(f.hosts))]
		crash := r.IntN(4) == 0
		again := r.IntN(3) == 0
		mu.Unlock()
		if crash {
			if err := h.RestartService("kured-host"); err != nil {
				t.Fatal(err)
			}
			crashes++
		}
		if again && h.Up() && !h.RebootRequired() {
			if err := h.SetRebootRequired(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Let everyone finish what they started, then check.
	for _, h := range f.hosts {
		if err := h.SetRebootRequired(false); err != nil {
			t.Fatal(err)
		}
	}
	f.waitDone(ctx, f.hosts, 1)
	f.check(ctx, limits(3, 1))
	acq := f.a.Acquisitions()
	t.Logf("seed %d: %d nodes, %d acquisitions, %d daemon crashes, %d revisions audited, violations: 0",
		seed, nodes, len(acq), crashes, len(f.a.History()))
	if cl, z := f.a.MaxHolders(zoneLabel); cl > 3 || z > 1 {
		t.Errorf("max holders %d, per zone %d", cl, z)
	}
}

// writeClaim writes a claim on h by hand, with the node's own credentials,
// as a daemon that then died would have left it.
func writeClaim(t *testing.T, ctx context.Context, h *cluster.SimHost, label string, annotation string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{claim.Label: label},
		"annotations": map[string]any{claim.Annotation: annotation},
	}})
	if _, err := h.Client.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mustClaim(t *testing.T, c claim.Claim) string {
	s, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitHolding(t *testing.T, ctx context.Context, name string, want bool) {
	t.Helper()
	for {
		n, err := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil && (n.Labels[claim.Label] == string(claim.Holding)) == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s holding=%v never happened", name, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestDeletedHolderFreesSlot: an operator deleting a dead node's Node
// object frees the slot it held.
func TestDeletedHolderFreesSlot(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	f := newFleet(t, ctx, []hostSpec{
		{name: "del-dead", limits: limits(1, 0), idle: true},
		{name: "del-next", limits: limits(1, 0), hold: 100 * time.Millisecond},
	})
	dead, next := f.host("del-dead"), f.host("del-next")
	now := time.Now().UTC()
	writeClaim(t, ctx, dead, string(claim.Holding), mustClaim(t, claim.Claim{State: claim.Holding, Since: now, Updated: now, Acquired: &now, Limits: limits(1, 0), BootID: dead.BootID()}))
	if err := next.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if next.Boots() != 1 {
		t.Fatal("the next node rebooted while the dead one held the only slot")
	}
	dead.Shutdown()
	if err := cp.Admin.CoreV1().Nodes().Delete(ctx, dead.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitDone(ctx, []*cluster.SimHost{next}, 2)
	f.check(ctx, limits(1, 0))
}

// TestUnreadableClaimBlocksASlot: a claim nobody can parse counts as
// holding (with the strictest limit) and is reported; once it is removed
// the queue moves.
func TestUnreadableClaimBlocksASlot(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	alarms := make(chan claim.Alarm, 10)
	m := metrics.New()
	f := newFleet(t, ctx, []hostSpec{
		{name: "bad-claim", idle: true},
		{name: "bad-next", limits: limits(3, 0), hold: 100 * time.Millisecond, alarms: alarms, metrics: m},
	})
	bad, next := f.host("bad-claim"), f.host("bad-next")
	writeClaim(t, ctx, bad, string(claim.Holding), `{"v":1,"limits":`)
	if err := next.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-alarms:
		if a.Node != bad.Name || !strings.Contains(a.What, "cannot be read") {
			t.Errorf("alarm %+v", a)
		}
	case <-ctx.Done():
		t.Fatal("no alarm about the unreadable claim")
	}
	time.Sleep(500 * time.Millisecond)
	if next.Boots() != 1 {
		t.Fatal("a node took a slot while an unreadable claim (counted as holding, concurrency 1) was there")
	}
	expectEvent(t, ctx, bad.Name, alarm.ReasonUnreadableClaim, "cannot be read")
	if v := testutil.ToFloat64(m.ClaimAlarms.WithLabelValues("unreadable")); v != 1 {
		t.Errorf("kured_host_claim_alarms{state=unreadable} = %v, want 1", v)
	}
	writeClaim(t, ctx, bad, "", "")
	f.waitDone(ctx, []*cluster.SimHost{next}, 2)
}

// TestForgedClaimRaisesTheAlarm: a node writes, with its own credentials,
// a holding claim that cannot be true: acquired and updated an hour in the
// future (it would never reach an alarm age, and a TTL would never count
// it out), or recording a zone its Node is not in. The other nodes' locks
// do not believe it: each raises the UnreadableClaim alarm (an Event on
// the forger's Node, the metric) and counts it as holding with
// concurrency 1, so neither of them takes a slot, although each has room
// in its own zone under the limits the claims publish. Once the forger's
// claim is gone, they reboot, within the limits.
func TestForgedClaimRaisesTheAlarm(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
		forge        func(c *claim.Claim)
		says         string
	}{
		{"an hour in the future", "future", func(c *claim.Claim) {
			at := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
			c.Acquired, c.Updated = &at, at
		}, "and acquired is"},
		{"in a zone it is not in", "zone", func(c *claim.Claim) {
			c.Groups = map[string]string{zoneLabel: "zone-c"}
		}, `recorded group topology.kubernetes.io/zone="zone-c" but the node's label is "zone-a": relabelled while holding, or forged`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			alarms := make(chan claim.Alarm, 10)
			m := metrics.New()
			f := newFleet(t, ctx, []hostSpec{
				{name: tc.prefix + "-forger", zone: "zone-a", idle: true},
				{name: tc.prefix + "-next-b", zone: "zone-b", limits: limits(3, 1), hold: 100 * time.Millisecond, alarms: alarms, metrics: m},
				{name: tc.prefix + "-next-c", zone: "zone-c", limits: limits(3, 1), hold: 100 * time.Millisecond},
			})
			forger, nextB, nextC := f.host(tc.prefix+"-forger"), f.host(tc.prefix+"-next-b"), f.host(tc.prefix+"-next-c")
			now := time.Now().UTC().Truncate(time.Millisecond)
			c := claim.Claim{State: claim.Holding, Since: now.Add(-time.Minute), Updated: now, Acquired: &now, Limits: limits(3, 1),
				Groups: map[string]string{zoneLabel: "zone-a"}, BootID: forger.BootID(), Phase: claim.PhaseRebooting, Cordoned: true}
			tc.forge(&c)
			writeClaim(t, ctx, forger, string(claim.Holding), mustClaim(t, c))
			for _, h := range []*cluster.SimHost{nextB, nextC} {
				if err := h.SetRebootRequired(true); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case a := <-alarms:
				t.Logf("alarm raised by %s: node %s, state %s, unreadable %v: %s", nextB.Name, a.Node, a.State, a.Unreadable, a.What)
				if a.Node != forger.Name || !a.Unreadable || a.State != claim.Holding || !strings.Contains(a.What, tc.says) || !strings.Contains(a.What, "not believed") {
					t.Errorf("alarm %+v, want the forger's claim not believed: %q", a, tc.says)
				}
			case <-ctx.Done():
				t.Fatal("no alarm about the forged claim")
			}
			time.Sleep(time.Second)
			if nextB.Boots() != 1 || nextC.Boots() != 1 {
				t.Fatalf("a node rebooted while the forged claim counted as holding with concurrency 1 (boots: %d, %d)", nextB.Boots(), nextC.Boots())
			}
			for _, h := range []*cluster.SimHost{nextB, nextC} {
				n, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if st := n.Labels[claim.Label]; st != string(claim.Waiting) {
					t.Errorf("%s: claim %q, want waiting behind the forged claim", h.Name, st)
				}
			}
			e := expectEvent(t, ctx, forger.Name, alarm.ReasonUnreadableClaim, tc.says)
			t.Logf("event on %s: %s: %s", forger.Name, alarm.ReasonUnreadableClaim, e)
			if v := testutil.ToFloat64(m.ClaimAlarms.WithLabelValues("unreadable")); v != 1 {
				t.Errorf("kured_host_claim_alarms{state=unreadable} = %v, want 1", v)
			}
			writeClaim(t, ctx, forger, "", "")
			f.waitDone(ctx, []*cluster.SimHost{nextB, nextC}, 2)
			if err := f.a.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			// While the forged claim was there nobody else held a slot
			// (concurrency 1), and once it was gone the two took theirs
			// within the limits.
			var forged *cluster.Acquisition
			acqs := f.a.Acquisitions()
			for i, a := range acqs {
				if a.Node == forger.Name {
					forged = &acqs[i]
				}
			}
			if forged == nil || !forged.ReleasedOK {
				t.Fatalf("the auditor did not see the forged claim come and go: %+v", acqs)
			}
			for _, a := range acqs {
				if a.Node != forger.Name && a.Held.RV < forged.Released.RV {
					t.Errorf("%s held a slot (rv %d) while the forged claim did (until rv %d)", a.Node, a.Held.RV, forged.Released.RV)
				}
			}
			if v := f.a.CheckLimits(limits(3, 1)); len(v) > 0 {
				t.Errorf("limits: %v", v)
			}
			// The forger released in the boot it "took" the slot in:
			// that is the forgery, not the protocol; check the others.
			f.a.Scope = func(n string) bool { return n == nextB.Name || n == nextC.Name }
			f.check(ctx, limits(3, 1))
		})
	}
}

// TestDeadEnteringKeepsItsUnit: a node whose daemon died right after
// announcing keeps its unit of capacity, and raises the entering alarm.
func TestDeadEnteringKeepsItsUnit(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	alarms := make(chan claim.Alarm, 10)
	m := metrics.New()
	f := newFleet(t, ctx, []hostSpec{
		{name: "ent-dead", zone: "zone-a", idle: true},
		{name: "ent-1", zone: "zone-b", limits: limits(2, 1), hold: 1500 * time.Millisecond, alarms: alarms, metrics: m},
		{name: "ent-2", zone: "zone-c", limits: limits(2, 1), hold: 100 * time.Millisecond},
	})
	dead := f.host("ent-dead")
	old := time.Now().UTC().Add(-time.Minute)
	writeClaim(t, ctx, dead, string(claim.Entering), mustClaim(t, claim.Claim{State: claim.Entering, Since: old, Updated: old, Limits: limits(2, 1), Groups: map[string]string{zoneLabel: "zone-a"}}))
	f.host("ent-1").SetRebootRequired(true)
	waitHolding(t, ctx, "ent-1", true)
	f.host("ent-2").SetRebootRequired(true)
	// ent-2 fits in zone c, but the dead entering claim keeps the second
	// unit: it must wait for ent-1.
	waitHolding(t, ctx, "ent-1", false)
	select {
	case a := <-alarms:
		if a.Node != dead.Name || a.State != claim.Entering {
			t.Errorf("alarm %+v", a)
		}
	case <-ctx.Done():
		t.Fatal("no alarm about the dead entering claim")
	}
	expectEvent(t, ctx, dead.Name, alarm.ReasonEnteringAlarm, "its daemon is probably gone")
	if v := testutil.ToFloat64(m.ClaimAlarms.WithLabelValues("entering")); v != 1 {
		t.Errorf("kured_host_claim_alarms{state=entering} = %v, want 1", v)
	}
	f.waitDone(ctx, []*cluster.SimHost{f.host("ent-1"), f.host("ent-2")}, 2)
	if err := f.a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.a.Acquisitions() {
		if a.Node == "ent-2" {
			for _, b := range f.a.Acquisitions() {
				if b.Node == "ent-1" && a.Held.RV < b.Released.RV {
					t.Errorf("ent-2 held while ent-1 did, though the dead entering claim keeps a unit of concurrency 2")
				}
			}
		}
	}
	f.check(ctx, limits(2, 1))
}

// TestDeadWaitingHead: a waiting claim at the head of the queue whose
// daemon is gone (Node still Ready) is passed over after the grace; a
// NotReady one as soon as the next node reads it, a second after the
// queue let it go without its announcing (the queue is read as metadata,
// without readiness).
func TestDeadWaitingHead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		notReady bool
		min, max time.Duration
	}{
		{"silent but Ready", false, 2 * time.Second, 20 * time.Second},
		{"NotReady", true, 0, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			prefix := "head-ready"
			if tc.notReady {
				prefix = "head-down"
			}
			f := newFleet(t, ctx, []hostSpec{
				{name: prefix + "-dead", idle: true},
				{name: prefix + "-next", limits: limits(1, 0), hold: 100 * time.Millisecond, grace: 2 * time.Second},
			})
			dead, next := f.host(prefix+"-dead"), f.host(prefix+"-next")
			if tc.notReady {
				if err := dead.SetReady(ctx, false); err != nil {
					t.Fatal(err)
				}
				// Let the lifecycle stand-in taint it first: a node's write
				// racing the controller's taint is refused (NodeRestriction).
				for {
					n, err := cp.Admin.CoreV1().Nodes().Get(ctx, dead.Name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if len(n.Spec.Taints) > 0 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			old := time.Now().UTC().Add(-time.Hour)
			writeClaim(t, ctx, dead, string(claim.Waiting), mustClaim(t, claim.Claim{State: claim.Waiting, Since: old, Updated: old, Limits: limits(1, 0)}))
			began := time.Now()
			if err := next.SetRebootRequired(true); err != nil {
				t.Fatal(err)
			}
			waitHolding(t, ctx, next.Name, true)
			took := time.Since(began)
			t.Logf("passed over the dead head after %s", took.Round(10*time.Millisecond))
			if took < tc.min || took > tc.max {
				t.Errorf("took the slot after %s, want between %s and %s", took, tc.min, tc.max)
			}
		})
	}
}

// TestAccessCheck: with the RBAC manifest the check passes; a user with
// no such rights gets the manifest in the error.
func TestAccessCheck(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	f := newFleet(t, ctx, []hostSpec{{name: "access-node", idle: true}})
	if err := kube.CheckAccess(ctx, f.host("access-node").Client); err != nil {
		t.Errorf("node identity with the manifest applied: %v", err)
	}
	stranger, err := cp.UserClient("stranger", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = kube.CheckAccess(ctx, stranger)
	if err == nil || !strings.Contains(err.Error(), "may not get, list, watch Nodes") || !strings.Contains(err.Error(), "kind: ClusterRoleBinding") {
		t.Errorf("error without the manifest: %v", err)
	}
}

// TestReleaseDelaySurvivesRestart: the release delay's end is recorded in
// the claim, so a daemon restarted during the delay still holds the slot
// until then, and no longer.
func TestReleaseDelaySurvivesRestart(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	const delay = 2 * time.Second
	f := newFleet(t, ctx, []hostSpec{{name: "delay-1", limits: limits(1, 0), hold: 50 * time.Millisecond, releaseDelay: delay}})
	h := f.host("delay-1")
	if err := h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	// Wait for the delay to start, then crash the daemon mid-delay.
	var releaseAt time.Time
	for releaseAt.IsZero() {
		n, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := claim.Parse(n.Labels[claim.Label], n.Annotations[claim.Annotation]); err == nil && c.ReleaseAt != nil {
			releaseAt = *c.ReleaseAt
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if err := h.RestartService("kured-host"); err != nil {
		t.Fatal(err)
	}
	waitHolding(t, ctx, h.Name, false)
	released := time.Now()
	if released.Before(releaseAt) {
		t.Errorf("released %s before the recorded end of the delay", releaseAt.Sub(released))
	}
	if late := released.Sub(releaseAt); late > time.Second {
		t.Errorf("released %s after the end of the delay: the restart started it over", late)
	}
	f.check(ctx, limits(1, 0))
}

// expectEvent waits for a warning Event with reason about node, and
// returns its message. Each node that reports it writes its own (their
// names are random: daemon/events), once per episode.
func expectEvent(t *testing.T, ctx context.Context, node, reason, says string) string {
	t.Helper()
	for {
		list, err := cp.Admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		by := map[string]int{}
		for _, e := range list.Items {
			if e.Reason == reason {
				found = append(found, e.Message)
				by[e.Source.Host]++
				if e.Type != "Warning" || !strings.Contains(e.Message, says) {
					t.Errorf("event %s: type %s, message %q", reason, e.Type, e.Message)
				}
			}
		}
		for host, n := range by {
			if n > 1 {
				t.Errorf("%d %s events from %s, want one per episode", n, reason, host)
			}
		}
		if len(found) > 0 {
			return found[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %s event on %s", reason, node)
			return ""
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestObserveSavesTheConflict: the release after the daemon's own
// uncordon conflicts once (the uncordon moved the Node's resourceVersion),
// unless the lock is given the uncordon's answer; either way the claim is
// gone after Release.
func TestObserveSavesTheConflict(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	f := newFleet(t, ctx, []hostSpec{{name: "observe-1", idle: true}})
	h := f.host("observe-1")
	for _, tc := range []struct {
		observe   bool
		conflicts int64
	}{{false, 1}, {true, 0}} {
		t.Run(fmt.Sprintf("observe=%v", tc.observe), func(t *testing.T) {
			client, conflicts, _ := conflictClient(t, h)
			l := lock.New(lock.Options{Client: client, Node: h.Name, Limits: limits(1, 0), WaitingGrace: time.Minute,
				BootID: func() (string, error) { return h.BootID(), nil }})
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Join(ctx, marks.Change{}); err != nil {
				t.Fatal(err)
			}
			for _, on := range []string{"true", "null"} {
				n, err := client.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":`+on+`}}`), metav1.PatchOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if tc.observe {
					l.Observe(n)
				}
			}
			before := conflicts.Load()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if got := conflicts.Load() - before; got != tc.conflicts {
				t.Errorf("%d conflicts in Release, want %d", got, tc.conflicts)
			}
			n, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := n.Labels[claim.Label]; ok {
				t.Errorf("claim label %q left after Release", v)
			}
		})
	}
}

// TestJoinBuildsOnAFreshNode: a need comes long after the daemon last read
// its Node, and others change the Node meanwhile (here the admin, as the
// kubelet's status reports and the controllers' taints do). The join reads
// the Node first and writes once, with no conflict; a join right after
// the daemon read its Node writes on that version without reading again.
func TestJoinBuildsOnAFreshNode(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	f := newFleet(t, ctx, []hostSpec{{name: "fresh-1", idle: true}})
	h := f.host("fresh-1")
	untainted(t, ctx, h.Name)
	for _, tc := range []struct {
		name            string
		changed         bool
		later           time.Duration
		gets, conflicts int64
	}{
		{"changed long ago", true, 2 * time.Second, 1, 0},
		{"read half a second ago", false, 500 * time.Millisecond, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, conflicts, gets := conflictClient(t, h)
			// The host's clock stands still but when the test moves it:
			// the join's pacing sleeps in real time.
			var offset atomic.Int64
			base := time.Now()
			l := lock.New(lock.Options{Client: client, Node: h.Name, Limits: limits(1, 0), WaitingGrace: time.Minute,
				Now:       func() time.Time { return base.Add(time.Duration(offset.Load())) },
				ServerNow: time.Now,
				BootID:    func() (string, error) { return h.BootID(), nil }})
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.changed {
				if _, err := cp.Admin.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType,
					[]byte(`{"metadata":{"labels":{"test.kured-host.dev/changed":"`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}}}`), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			offset.Store(int64(tc.later))
			gets.Store(0)
			if err := l.Join(ctx, marks.Change{}); err != nil {
				t.Fatal(err)
			}
			if g, c := gets.Load(), conflicts.Load(); g != tc.gets || c != tc.conflicts {
				t.Errorf("the join read its Node %d times and met %d conflicts, want %d and %d", g, c, tc.gets, tc.conflicts)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMarksAndReadyFeedTheLock: kured's marks and the Ready check after
// the boot read or write the Node between two claim writes; the next claim
// write builds on what they got (lock.Observe) and meets no conflict.
// Without it, the join after the in-progress mark and the release after the
// Ready check (which saw the kubelet's report, here the admin's patch)
// each meet one.
func TestMarksAndReadyFeedTheLock(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	f := newFleet(t, ctx, []hostSpec{{name: "feed-1", idle: true}})
	h := f.host("feed-1")
	untainted(t, ctx, h.Name)
	for _, tc := range []struct {
		observe   bool
		conflicts int64
	}{{true, 0}, {false, 2}} {
		t.Run(fmt.Sprintf("observe=%v", tc.observe), func(t *testing.T) {
			client, conflicts, _ := conflictClient(t, h)
			base := time.Now() // a clock that stands still: no read before the join
			l := lock.New(lock.Options{Client: client, Node: h.Name, Limits: limits(1, 0), WaitingGrace: time.Minute,
				Now: func() time.Time { return base }, ServerNow: time.Now,
				BootID: func() (string, error) { return h.BootID(), nil }})
			var observe func(*corev1.Node)
			if tc.observe {
				observe = l.Observe
			}
			m := &marks.Marker{Client: client, Node: h.Name, Annotate: true, Observe: observe}
			if _, _, err := l.Own(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.Write(ctx, m.InProgress(time.Now())); err != nil {
				t.Fatal(err)
			}
			if err := l.Join(ctx, marks.Change{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cp.Admin.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"test.kured-host.dev/kubelet":"`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			ready := &kube.ReadyWatch{Client: client, Node: h.Name, Boot: func() (string, error) { return h.BootID(), nil }, Observe: observe}
			_, _, err := ready.Next(ctx, 0)
			ready.Stop()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.Write(ctx, m.NotNeeded()); err != nil {
				t.Fatal(err)
			}
			if got := conflicts.Load(); got != tc.conflicts {
				t.Errorf("%d conflicts, want %d", got, tc.conflicts)
			}
		})
	}
}

// untainted waits until the node-lifecycle stand-in has taken a new
// Node's not-ready taint away (the kubelet reported Ready): a write of its
// own, which must not fall inside a test's count of conflicts.
func untainted(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	for {
		n, err := cp.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == cluster.NotReadyTaint }) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// conflictClient is a client of host h that counts the writes refused
// with a conflict and the GETs of h's own Node.
func conflictClient(t *testing.T, h *cluster.SimHost) (client kubernetes.Interface, conflicts, gets *atomic.Int64) {
	t.Helper()
	conflicts, gets = new(atomic.Int64), new(atomic.Int64)
	client, _, err := hostClients(h, func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusConflict {
				conflicts.Add(1)
			}
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/nodes/"+h.Name) {
				gets.Add(1)
			}
			return resp, err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return client, conflicts, gets
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestFreedSlotInAnotherZone (L3): zone a is held for a minute by a0
// with twenty more of its nodes waiting behind it; b0 holds zone b for
// 8 s; b1, of zone b, joins last, behind all of zone a. When b0 is done,
// b1 may go: it is the front of its own class (zone b), watching the
// active claims, and takes the slot within 10 s of its release
// (docs/claims.md, "The front"), not when zone a's queue has gone. It
// never reads zone a's claims: every List it makes of waiting claims by
// their place selects its own class (zone b).
func TestFreedSlotInAnotherZone(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	var mu sync.Mutex
	var others []string
	record := func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			q := r.URL.Query()
			if sel := q.Get("labelSelector"); r.Method == http.MethodGet && strings.Contains(sel, claim.SinceLabel+"<") &&
				!strings.Contains(sel, zoneLabel+"=zone-b") {
				mu.Lock()
				others = append(others, sel)
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	specs := []hostSpec{
		{name: "far-a0", zone: "zone-a", limits: limits(3, 1), hold: time.Minute},
		{name: "far-b0", zone: "zone-b", limits: limits(3, 1), hold: 8 * time.Second},
		{name: "far-b1", zone: "zone-b", limits: limits(3, 1), hold: 200 * time.Millisecond, wrap: record},
	}
	for i := range 20 {
		specs = append(specs, hostSpec{name: fmt.Sprintf("far-a%02d", i+1), zone: "zone-a", limits: limits(3, 1), hold: 200 * time.Millisecond})
	}
	f := newFleet(t, ctx, specs)
	for _, name := range []string{"far-a0", "far-b0"} {
		if err := f.host(name).SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
		waitHolding(t, ctx, name, true)
	}
	for i := range 20 {
		if err := f.host(fmt.Sprintf("far-a%02d", i+1)).SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	cluster.WaitFor(t, ctx, "zone a's twenty waiting", 50*time.Millisecond, func() bool {
		list, err := cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: claim.Label + "=" + string(claim.Waiting)})
		return err == nil && len(list.Items) == 20
	})
	if err := f.host("far-b1").SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	f.waitDone(ctx, f.hosts, 2)
	f.check(ctx, limits(3, 1))
	var b0, b1 cluster.Acquisition
	for _, a := range f.a.Acquisitions() {
		switch a.Node {
		case "far-b0":
			b0 = a
		case "far-b1":
			b1 = a
		}
	}
	gap := b1.Held.Seen.Sub(b0.Released.Seen)
	t.Logf("far-b1 took the slot %s after far-b0 gave it back", gap.Round(time.Millisecond))
	if gap > 10*time.Second {
		t.Errorf("far-b1 took the freed slot %s after it was freed, more than 10 s", gap.Round(time.Second))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(others) > 0 {
		t.Errorf("far-b1 read waiting claims outside its class %d times: %q", len(others), others)
	}
}

// TestMarkStopped: what the unit's ExecStopPost= runs, with the node's
// own credentials: a waiting claim gets the stopped label (and the node's
// lock takes it off when it writes its claim again, here by taking its
// slot); a holding claim is left alone; a node cannot mark another's.
func TestMarkStopped(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	f := newFleet(t, ctx, []hostSpec{{name: "stopped-1", idle: true}, {name: "stopped-2", idle: true}})
	h, other := f.host("stopped-1"), f.host("stopped-2")
	labels := func() map[string]string {
		t.Helper()
		n, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}
	l := lock.New(lock.Options{Client: h.Client, Node: h.Name, Limits: limits(1, 0), WaitingGrace: time.Minute,
		BootID: func() (string, error) { return h.BootID(), nil }})
	if _, _, err := l.Own(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Join(ctx, marks.Change{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.MarkStopped(ctx, other.Client, h.Name); !apierrors.IsForbidden(err) {
		t.Errorf("another node marks this one: %v, want forbidden", err)
	}
	if marked, err := lock.MarkStopped(ctx, h.Client, h.Name); err != nil || !marked {
		t.Fatalf("mark the waiting claim: %v, %v", marked, err)
	}
	if v, ok := labels()[queue.StoppedLabel]; !ok || labels()[claim.Label] != string(claim.Waiting) {
		t.Fatalf("after the mark: stopped label %q (%v), claim %q", v, ok, labels()[claim.Label])
	}
	// Back (a new lock, as a restarted daemon): it takes its slot, and
	// its writes take the mark off.
	l = lock.New(lock.Options{Client: h.Client, Node: h.Name, Limits: limits(1, 0), WaitingGrace: time.Minute,
		BootID: func() (string, error) { return h.BootID(), nil }})
	if _, _, err := l.Own(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, lock.Take{}); err != nil {
		t.Fatal(err)
	}
	if v, ok := labels()[queue.StoppedLabel]; ok {
		t.Errorf("the stopped label %q is left on a claim its daemon wrote again", v)
	}
	if marked, err := lock.MarkStopped(ctx, h.Client, h.Name); err != nil || marked {
		t.Errorf("mark a holding claim: %v, %v; want it left alone", marked, err)
	}
	if _, ok := labels()[queue.StoppedLabel]; ok || labels()[claim.Label] != string(claim.Holding) {
		t.Errorf("a holding claim was marked: %v", labels())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
