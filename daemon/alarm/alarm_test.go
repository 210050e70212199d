package alarm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/events"
)

// oldName is the name an alarm's Event had before its names were random:
// derived from the reason and the episode, so that any node could tell
// it in advance.
func oldName(reason string, a claim.Alarm) string {
	sum := sha256.Sum256([]byte(reason + "\x00" + a.Node + "/" + string(a.State) + "/" + a.Since.String()))
	return a.Node + ".kured-host." + hex.EncodeToString(sum[:6])
}

// TestACompromisedNodeCannotSilenceItsAlarm: the node the alarm is about
// creates, with the name the alarm's Event would have had, an Event of
// its own that says nothing is wrong (nodes may create Events, not read
// them). Two honest nodes then report the alarm: each writes its Warning,
// under a name of its own with a random part, and none of them is the
// name the compromised node took.
func TestACompromisedNodeCannotSilenceItsAlarm(t *testing.T) {
	acquired := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		alarm  claim.Alarm
		reason string
	}{
		{"holder", claim.Alarm{Node: "bad", State: claim.Holding, Since: acquired, Age: 2 * time.Hour, What: "has held a reboot slot for 2h0m0s"}, ReasonHolderAlarm},
		{"not believed", claim.Alarm{Node: "bad", State: claim.Holding, Unreadable: true, What: "claim is not believed"}, ReasonUnreadableClaim},
		{"entering", claim.Alarm{Node: "bad", State: claim.Entering, Since: acquired, Age: time.Hour, What: "has been taking a slot for 1h0m0s"}, ReasonEnteringAlarm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			ctx := context.Background()
			taken := oldName(tc.reason, tc.alarm)
			if _, err := client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: taken, Namespace: metav1.NamespaceDefault},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "bad"},
				Reason:         "AllGood", Type: corev1.EventTypeNormal, Message: "nothing to see",
				Source: corev1.EventSource{Component: events.Component, Host: "bad"},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, host := range []string{"honest-1", "honest-2"} {
				r := &Report{Events: &events.Recorder{Client: client, Host: host}}
				r.Raise(ctx, tc.alarm)
			}
			list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			random := regexp.MustCompile(`^bad\.kured-host\.[0-9a-f]{16}$`)
			names, hosts := map[string]bool{}, map[string]bool{}
			for _, e := range list.Items {
				if e.Reason != tc.reason {
					continue
				}
				if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Name != "bad" || e.Message != "Node bad "+tc.alarm.What {
					t.Errorf("event %s: %s on %s: %q", e.Name, e.Type, e.InvolvedObject.Name, e.Message)
				}
				if e.Name == taken || !random.MatchString(e.Name) {
					t.Errorf("event name %q: want bad.kured-host. and 16 random hex digits, not %q", e.Name, taken)
				}
				names[e.Name], hosts[e.Source.Host] = true, true
			}
			if len(names) != 2 || !hosts["honest-1"] || !hosts["honest-2"] {
				t.Errorf("%s warnings %v from %v, want one from each honest node, under different names", tc.reason, names, hosts)
			}
		})
	}
}
