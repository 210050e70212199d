package locktest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kured-host/kured-host/daemon/alarm"
	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/test/cluster"
)

// TestAlarmCannotBeSilenced (issue 39, finding 5): a compromised node
// holds a slot forever, with a claim held for two hours (HolderAlarm) or
// acquired an hour in the future (not believed: UnreadableClaim). Before
// it does, it creates, with its own node credentials, an Event under the
// name the alarm's Event used to have (derived from the reason and the
// episode), saying nothing is wrong: a node may create Events though it
// cannot read them, and the honest reporters took that name as "already
// reported". The alarm's Warning still appears on its Node: each honest
// reporter writes its own, under a name with a random part. Eight nodes
// wait behind it; only those at the front of the queue (fewer than three
// waiting claims ahead) write the Event, once each, so an episode has at
// most three (nobody enters: the claim blocks every slot). The nodes join
// in turn, and the first one's join lands seconds after the next three
// have looked at a queue without it (a CI run failed so, by less): a
// node reports only once its place has settled.
func TestAlarmCannotBeSilenced(t *testing.T) {
	const waiting, front = 8, 3
	for _, tc := range []struct {
		name, prefix, reason, says string
		forge                      func(c *claim.Claim)
	}{
		{"held for two hours", "alarm-held", alarm.ReasonHolderAlarm, "has held a reboot slot for", func(c *claim.Claim) {
			at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Millisecond)
			c.Since, c.Updated, c.Acquired = at.Add(-time.Minute), at, &at
		}},
		{"acquired in the future", "alarm-future", alarm.ReasonUnreadableClaim, "ahead of the API server's clock", func(c *claim.Claim) {
			at := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
			c.Updated, c.Acquired = at, &at
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			specs := []hostSpec{{name: tc.prefix + "-bad", zone: "zone-a", idle: true}}
			for i := range waiting {
				spec := hostSpec{name: fmt.Sprintf("%s-%d", tc.prefix, i), zone: "zone-b", limits: limits(3, 0), hold: 100 * time.Millisecond,
					pace: inTurn(i, 500*time.Millisecond)}
				if i == 0 {
					spec.wrap = slowJoin(3 * time.Second)
				}
				specs = append(specs, spec)
			}
			f := newFleet(t, ctx, specs)
			bad := f.host(tc.prefix + "-bad")
			now := time.Now().UTC().Truncate(time.Millisecond)
			c := claim.Claim{State: claim.Holding, Since: now.Add(-time.Minute), Updated: now, Acquired: &now, Limits: limits(1, 0),
				Groups: map[string]string{zoneLabel: "zone-a"}, BootID: bad.BootID(), Phase: claim.PhaseRebooting, Cordoned: true}
			tc.forge(&c)
			ann := mustClaim(t, c)
			taken := oldAlarmEventName(t, bad.Name, tc.reason, ann)
			if _, err := bad.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: taken, Namespace: metav1.NamespaceDefault},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: bad.Name, UID: types.UID(bad.Name), APIVersion: "v1"},
				Reason:         "Rebooted", Type: corev1.EventTypeNormal, Message: "Node " + bad.Name + " rebooted",
				Source: corev1.EventSource{Component: "kured-host", Host: bad.Name},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("the compromised node creates the alarm's old name: %v", err)
			}
			writeClaim(t, ctx, bad, string(claim.Holding), ann)
			for _, h := range f.hosts {
				if h != bad {
					if err := h.SetRebootRequired(true); err != nil {
						t.Fatal(err)
					}
				}
			}
			warnings := func() []corev1.Event {
				list, err := cp.Admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
					FieldSelector: "involvedObject.name=" + bad.Name + ",reason=" + tc.reason + ",type=Warning"})
				if err != nil {
					t.Fatal(err)
				}
				return list.Items
			}
			// The front's three write theirs at their first look; then
			// every node has looked a few times.
			deadline := time.Now().Add(30 * time.Second)
			for len(warnings()) < front && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			waitClaims(t, ctx, f.hosts, bad, claim.Waiting)
			time.Sleep(3 * time.Second)
			evs := warnings()
			random := regexp.MustCompile(`^` + regexp.QuoteMeta(bad.Name) + `\.kured-host\.[0-9a-f]{16}$`)
			names, hosts := map[string]bool{}, map[string]bool{}
			for _, e := range evs {
				t.Logf("%s by %s: %s", e.Name, e.Source.Host, e.Message)
				if e.Name == taken || !random.MatchString(e.Name) {
					t.Errorf("event name %s: want %s.kured-host. and 16 random hex digits, not the name the node took (%s)", e.Name, bad.Name, taken)
				}
				if hosts[e.Source.Host] || e.Source.Host == bad.Name {
					t.Errorf("a second event from %s, or one from the node itself", e.Source.Host)
				}
				if !strings.Contains(e.Message, tc.says) {
					t.Errorf("event %s says %q, want %q", e.Name, e.Message, tc.says)
				}
				names[e.Name], hosts[e.Source.Host] = true, true
			}
			if len(evs) == 0 {
				t.Fatalf("no %s Warning on %s: the compromised node silenced it", tc.reason, bad.Name)
			}
			if len(evs) > front {
				t.Errorf("%d %s Warnings for one episode with %d nodes waiting, want at most %d (the front of the queue)", len(evs), tc.reason, waiting, front)
			}
			if len(evs) < 2 {
				t.Errorf("%d %s Warnings, want the front's (up to %d) under different names", len(evs), tc.reason, front)
			}
			for _, h := range f.hosts {
				if h != bad && h.Boots() != 1 {
					t.Errorf("%s rebooted behind a claim that holds the only slot", h.Name)
				}
			}
		})
	}
}

// inTurn paces a driver's first step (its join) by i × d, none after.
func inTurn(i int, d time.Duration) func() time.Duration {
	var joined atomic.Bool
	return func() time.Duration {
		if joined.Swap(true) {
			return 0
		}
		return time.Duration(i) * d
	}
}

// slowJoin holds back by d the first write of a Node (the join): the
// join's place in the queue is taken before the write, so for d the
// nodes that joined after it see a queue without it.
func slowJoin(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	var joined atomic.Bool
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/nodes/") && !joined.Swap(true) {
				select {
				case <-r.Context().Done():
					return nil, r.Context().Err()
				case <-time.After(d):
				}
			}
			return rt.RoundTrip(r)
		})
	}
}

// oldAlarmEventName is the name the alarm's Event had before the names
// were random: the reason and the episode (node, state, and the time
// the age counts from: the claim's acquired, none for a claim not
// believed), hashed; anyone could tell it from the claim.
func oldAlarmEventName(t *testing.T, node, reason, annotation string) string {
	t.Helper()
	c, err := claim.Parse(string(claim.Holding), annotation)
	if err != nil {
		t.Fatal(err)
	}
	var since time.Time
	if reason == alarm.ReasonHolderAlarm {
		since = *c.Acquired
	}
	sum := sha256.Sum256([]byte(reason + "\x00" + node + "/" + string(claim.Holding) + "/" + since.String()))
	return node + ".kured-host." + hex.EncodeToString(sum[:6])
}

// waitClaims waits until every host but skip has a claim in state.
func waitClaims(t *testing.T, ctx context.Context, hosts []*cluster.SimHost, skip *cluster.SimHost, state claim.State) {
	t.Helper()
	for _, h := range hosts {
		if h == skip {
			continue
		}
		for {
			n, err := cp.Admin.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Labels[claim.Label] == string(state) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s never %s", h.Name, state)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}
