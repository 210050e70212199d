package cycletest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/steer"
)

// TestClusterSettingsSendNoSecret: whoever can write the cluster's
// settings cannot have a node send a host's secret anywhere. A real HTTP
// server on loopback stands for theirs. First the settings name a
// root-only file as the password, with their URL: both nodes refuse them
// (SettingsInvalid), the server receives nothing, and both reboot under
// their own configuration. Then the settings give only the URL: the node
// whose files hold no credentials asks the server, with none, for its
// alerts (so the server is reachable and its silence before meant
// something); the node whose files hold a password refuses the URL, and
// its password never reaches the server.
func TestClusterSettingsSendNoSecret(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	var mu sync.Mutex
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	defer srv.Close()
	received := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), auths...)
	}

	dir := t.TempDir()
	token := filepath.Join(dir, "join-token") // as a k3s server token would be
	own := filepath.Join(dir, "prometheus-password")
	for p, s := range map[string]string{token: "K10joinsecret::server:abc\n", own: "ownpassword\n"} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setSettings := func(text string) {
		t.Helper()
		if err := steer.SetSettings(ctx, cp.Admin, text); err != nil {
			t.Fatal(err)
		}
		// A node reads the settings from the API server's cache when
		// its need comes: in a CI run that cache was still behind the
		// write, the node joined under the old settings and never asked
		// the server ("never asked the settings' server for alerts").
		waitFor(t, ctx, "the settings in the API server's cache", func() bool {
			cm, err := cp.Admin.CoreV1().ConfigMaps("kube-system").Get(ctx, "kured-host", metav1.GetOptions{ResourceVersion: "0"})
			return err == nil && cm.Data[steer.KeySettings] == text
		})
	}
	t.Cleanup(func() {
		_ = cp.Admin.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "kured-host", metav1.DeleteOptions{})
	})
	url := fmt.Sprintf("[blockers.prometheus]\nurl = %q\n", srv.URL)
	setSettings(url + fmt.Sprintf("username = \"kured\"\npassword_file = %q\n", token))

	plain := startNode(t, ctx, nodeSpec{name: "secrets-plain", edit: withoutPrometheusURL})
	keeper := startNode(t, ctx, nodeSpec{name: "secrets-keeper", edit: withoutPrometheusURL, config: func(c *config.Config) {
		c.Blockers.Prometheus.Username, c.Blockers.Prometheus.PasswordFile = "kured", own
	}})
	for _, n := range []*node{plain, keeper} {
		if err := n.h.SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	// The Event holds the first problems: the keeper's first is that
	// the URL is refused as well.
	expectEvent(t, ctx, plain.h.Name, "SettingsInvalid", "blockers.prometheus.password_file: not a cluster setting (a credential")
	expectEvent(t, ctx, keeper.h.Name, "SettingsInvalid", "blockers.prometheus.url: comes from the cluster's settings, but "+keeper.config)
	refusedURL := func() int {
		return strings.Count(keeper.logs(), "blockers.prometheus.url: comes from the cluster's settings, but")
	}
	waitDone(t, ctx, plain, keeper)
	if got := received(); len(got) > 0 {
		t.Fatalf("the settings' server received %d requests (Authorization %q) from nodes that refused the settings", len(got), got)
	}

	refusedBefore := refusedURL()
	setSettings(url)
	for _, n := range []*node{plain, keeper} {
		if err := n.h.SetRebootRequired(true); err != nil {
			t.Fatal(err)
		}
	}
	// The Event of a second refusal within a minute is held back (the
	// events' spacing): the log has it.
	waitFor(t, ctx, keeper.h.Name+" refusing the URL alone", func() bool { return refusedURL() > refusedBefore })
	waitFor(t, ctx, "both nodes rebooted again", func() bool {
		return plain.h.Boots() >= 3 && keeper.h.Boots() >= 3
	})
	got := received()
	if len(got) == 0 {
		t.Errorf("%s never asked the settings' server for alerts", plain.h.Name)
	}
	for _, a := range got {
		if a != "" {
			t.Errorf("the settings' server received credentials: Authorization %q", a)
		}
	}
	for _, n := range []*node{plain, keeper} {
		if logs := n.logs(); strings.Contains(logs, "K10joinsecret") || strings.Contains(logs, "ownpassword") {
			t.Errorf("%s logged a secret", n.h.Name)
		}
	}
}

// withoutPrometheusURL leaves blockers.prometheus.url out of a written
// configuration, as config.toml.example ships it: the cluster's settings
// may set it.
func withoutPrometheusURL(data []byte) []byte {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "url = ") {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n"))
}
