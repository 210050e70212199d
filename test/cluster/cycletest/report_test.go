package cycletest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/marks"
)

// TestOperatorSignals: one host's cycle with everything an operator
// watches turned on. The webhook gets the drain, reboot and uncordon
// messages in order, and while the reboot message is being delivered the
// Node carries kured's in-progress annotation and the pre-reboot label;
// afterwards the post-reboot label and the most-recent-reboot-needed
// annotation; the Node's Events tell every transition in order; the
// metrics endpoint of the new boot shows the reboot's duration and the
// idle state.
func TestOperatorSignals(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	const name = "signals-0"
	type delivery struct {
		message     string
		labels      map[string]string
		annotations map[string]string
	}
	var mu sync.Mutex
	var got []delivery
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m struct{ Message string }
		_ = json.Unmarshal(b, &m)
		d := delivery{message: m.Message}
		// The daemon waits for this answer: the Node as it is now is the
		// Node as it was when the message was sent.
		if n, err := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			d.labels, d.annotations = n.Labels, n.Annotations
		}
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}))
	defer hook.Close()
	hu, _ := url.Parse(hook.URL)
	metricsAddr := freeAddr(t)

	n := startNode(t, ctx, nodeSpec{name: name, zone: "zone-a", config: func(c *config.Config) {
		c.Node.Annotate = true
		c.Node.PreRebootLabels = map[string]string{"example.com/reboot": "pending"}
		c.Node.PostRebootLabels = map[string]string{"example.com/reboot": "done"}
		var u config.URL
		if err := u.UnmarshalText([]byte("generic://" + hu.Host + "/hook?disabletls=yes&template=json")); err != nil {
			t.Fatal(err)
		}
		c.Notify.URLs = []config.URL{u}
		c.Metrics.Address = metricsAddr
	}})
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, n)

	// One Event per step an operator waits on: the need and the join
	// (nothing blocked it), the slot and the cordon, the drain and the
	// reboot, the new boot, the uncordon and the release (no release
	// delay: one write). SlotReleased is recorded just after the release
	// the wait above saw, and after the uncordon's message.
	wantReasons := []string{"RebootRequired", "SlotAcquired", "Rebooting", "Rebooted", "SlotReleased"}
	var reasons []string
	waitFor(t, ctx, "the SlotReleased event", func() bool {
		reasons = eventReasons(t, name)
		return len(reasons) > 0 && reasons[len(reasons)-1] == "SlotReleased"
	})
	if !slices.Equal(reasons, wantReasons) {
		t.Errorf("events %q, want %q", reasons, wantReasons)
	}

	mu.Lock()
	var messages []string
	for _, d := range got {
		messages = append(messages, d.message)
	}
	mu.Unlock()
	want := []string{"Draining node " + name, "Rebooting node " + name, "Node " + name + " rebooted & uncordoned successfully!"}
	if !slices.Equal(messages, want) {
		t.Errorf("webhook messages %q, want %q", messages, want)
	}
	for _, d := range got {
		if strings.HasPrefix(d.message, "Rebooting") {
			if d.annotations[marks.InProgress] == "" || d.labels["example.com/reboot"] != "pending" {
				t.Errorf("while rebooting: annotations %v, labels %v; want %s and example.com/reboot=pending", d.annotations, d.labels, marks.InProgress)
			}
		}
	}
	node, err := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Annotations[marks.InProgress]; ok || node.Annotations[marks.MostRecentNeeded] == "" || node.Labels["example.com/reboot"] != "done" {
		t.Errorf("after the cycle: annotations %v, labels %v", node.Annotations, node.Labels)
	}

	scrape := func() string {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var m string
	waitFor(t, ctx, "the idle state in the metrics", func() bool {
		m = scrape()
		return strings.Contains(m, `kured_host_state{state="idle"} 1`)
	})
	for _, want := range []string{
		`kured_reboot_required{node="` + name + `"} 0`,
		`kured_host_reboot_duration_seconds_count 1`,
		`kured_host_queue_position -1`,
		`kured_host_blockers{kind="window"} 0`,
		`kured_host_errors_total{kind="notify"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", m)
	}
}

// eventReasons lists the reasons of kured-host's Events on a node in the
// order they were written.
func eventReasons(t *testing.T, node string) []string {
	t.Helper()
	evs, err := cp.Admin.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	items := evs.Items
	rv := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	slices.SortFunc(items, func(a, b corev1.Event) int {
		return int(rv(a.ResourceVersion) - rv(b.ResourceVersion))
	})
	var reasons []string
	for _, e := range items {
		if e.Source.Component == "kured-host" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}
