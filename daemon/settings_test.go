package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/config"
)

// clusterText is the cluster's settings as the ConfigMap would hold them.
type clusterText struct{ text string }

func (c *clusterText) Settings(context.Context) (string, error) { return c.text, nil }

// all is every event recorded, one "Reason: message" a line.
func (e *eventLog) all() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for reason, ms := range e.messages {
		for _, m := range ms {
			out = append(out, reason+": "+m)
		}
	}
	return strings.Join(out, "\n")
}

// TestClusterSettingsSendNoSecret: whoever writes the cluster's settings
// cannot make a node send its credentials anywhere. A real HTTP server on
// loopback stands for the attacker's: it must receive nothing from a node
// whose files hold a password, whether the settings name the password file
// themselves or only the URL, while a node whose files hold no
// credentials asks it, with none, for its alerts (the server is reachable:
// its silence means something).
func TestClusterSettingsSendNoSecret(t *testing.T) {
	var mu sync.Mutex
	var got []string // the Authorization header of each request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	defer srv.Close()
	requests := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}

	dir := t.TempDir()
	secret := filepath.Join(dir, "join-token")
	if err := os.WriteFile(secret, []byte("K10secret::server:token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "[blockers.prometheus]\nurl = \"" + srv.URL + "\"\n"
	withPassword := "[blockers.prometheus]\nusername = \"kured\"\npassword_file = \"" + secret + "\"\n"
	tests := []struct {
		name, file, cluster string
		asks                bool   // the node asks the server
		reason              string // the Event, when it refuses
	}{
		{"the settings name the host's file", "", url + "username = \"x\"\npassword_file = \"" + secret + "\"\n", false, ReasonSettingsInvalid},
		{"the settings name a token file", "", url + "bearer_token_file = \"" + secret + "\"\n", false, ReasonSettingsInvalid},
		{"the settings' URL, the host's password", withPassword, url, false, ReasonSettingsInvalid},
		{"the settings' URL with a password in it", "", "[blockers.prometheus]\nurl = \"" + strings.Replace(srv.URL, "//", "//kured:pw@", 1) + "\"\n", false, ReasonSettingsInvalid},
		{"the settings' URL alone", "", url, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(path, []byte("version = 1\n"+tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := config.Load(path, config.Trust{})
			if err != nil {
				t.Fatal(err)
			}
			evs := &eventLog{}
			d := &Daemon{
				Config: l.Config, Log: slog.New(slog.DiscardHandler), Node: "n1", Lock: &idleLock{},
				Events: evs, Settings: &clusterText{tt.cluster},
				Reload: func(cluster string) (config.Config, error) {
					l, err := config.LoadWithCluster(path, config.Trust{}, cluster)
					if err != nil {
						return config.Config{}, err
					}
					return l.Config, nil
				},
				BlockersFor: func(c config.Config) []block.Blocker {
					if c.Blockers.Prometheus.URL.URL() == nil {
						return nil
					}
					return []block.Blocker{block.NewAlerts(c.Blockers.Prometheus)}
				},
			}
			before := len(requests())
			d.applySettings(context.Background(), d.Log)
			block.Check(context.Background(), d.Blockers)
			sent := requests()[before:]
			if tt.asks != (len(sent) > 0) {
				t.Errorf("requests to the settings' server: %q; want some: %v", sent, tt.asks)
			}
			for _, auth := range sent {
				if auth != "" {
					t.Errorf("the node sent credentials: Authorization %q", auth)
				}
			}
			if tt.reason != "" && !strings.Contains(evs.all(), tt.reason+": ") {
				t.Errorf("events:\n%s\nwant a %s warning", evs.all(), tt.reason)
			}
			if strings.Contains(evs.all(), "K10secret") {
				t.Errorf("an Event shows the secret:\n%s", evs.all())
			}
		})
	}
}

// TestSettingsRefusedBlamesTheRightLayer: when the reload that applies
// new cluster settings fails on one of this host's own files (edited
// since the daemon started), the Event says so, rather than blaming the
// cluster's settings; a problem of the settings is still theirs.
func TestSettingsRefusedBlamesTheRightLayer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte("version = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reload := func(cluster string) (config.Config, error) {
		l, err := config.LoadWithCluster(path, config.Trust{}, cluster)
		if err != nil {
			return config.Config{}, err
		}
		return l.Config, nil
	}
	settings := &clusterText{"[lock]\nconcurrency = 2\n"}
	evs := &eventLog{}
	d := &Daemon{Config: config.Default(), Log: slog.New(slog.DiscardHandler), Node: "n1", Lock: &idleLock{},
		Events: evs, Settings: settings, Reload: reload}

	// The host's file breaks, then the settings change.
	if err := os.WriteFile(path, []byte("version = 1\n[drain]\ntimeout = 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.applySettings(context.Background(), d.Log)
	if got := evs.all(); !strings.Contains(got, ReasonConfigInvalid+": This host's configuration files") ||
		!strings.Contains(got, path+":3: drain.timeout") || strings.Contains(got, ReasonSettingsInvalid) {
		t.Errorf("events:\n%s\nwant %s naming %s:3, and no %s", got, ReasonConfigInvalid, path, ReasonSettingsInvalid)
	}
	if d.Config.Lock.Concurrency != 1 {
		t.Errorf("concurrency %d: the settings were applied over a broken file", d.Config.Lock.Concurrency)
	}

	// Fixed, the same settings apply at the next look.
	if err := os.WriteFile(path, []byte("version = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.applySettings(context.Background(), d.Log)
	if d.Config.Lock.Concurrency != 2 {
		t.Errorf("concurrency %d after the file was fixed, want the settings' 2", d.Config.Lock.Concurrency)
	}

	// Settings that are bad themselves are the cluster's.
	settings.text = "[lock]\nconcurrency = 0\n"
	d.applySettings(context.Background(), d.Log)
	if got := evs.all(); !strings.Contains(got, ReasonSettingsInvalid+": The cluster's settings are not valid") {
		t.Errorf("events:\n%s\nwant %s", got, ReasonSettingsInvalid)
	}
}
