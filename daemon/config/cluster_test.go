package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestLoadWithCluster: the cluster's settings are a layer under the
// host's files, validated by the same rules, limited to the lock, the
// window and the blockers; each problem names the source, line and key.
func TestLoadWithCluster(t *testing.T) {
	tests := []struct {
		name, file, cluster string
		concurrency         int
		from                string // the origin of lock.concurrency
		errs                []string
	}{
		{"no cluster settings", "", "", 1, "built-in default", nil},
		{"the cluster's value over the default", "", "[lock]\nconcurrency = 3\n", 3, ClusterSource + ":2", nil},
		{"a file's value wins", "[lock]\nconcurrency = 2\n", "[lock]\nconcurrency = 3\n", 2, "config.toml:3", nil},
		{"version may be given", "", "version = 1\n[lock]\nconcurrency = 4\n", 4, ClusterSource + ":3", nil},
		{"a host's key is refused", "", "[lock]\nconcurrency = 3\n[sentinel]\nperiod = \"5s\"\n", 0, "",
			[]string{ClusterSource + ":4: sentinel.period: not a cluster setting (it is about one host): the cluster's settings may set only " +
				"lock.concurrency, lock.groups, window (days, start, end, time_zone), blockers (pod_selectors, inhibitors), " +
				"blockers.prometheus (url, alert_filter_regexp, alert_filter_match_only, alert_firing_only, timeout); set sentinel.period in each host's files"}},
		{"the lock's timings stay the host's", "", "[lock]\nttl = \"1h\"\n", 0, "",
			[]string{ClusterSource + ":2: lock.ttl: not a cluster setting"}},
		{"a bad value", "", "[lock]\nconcurrency = 0\n", 0, "",
			[]string{ClusterSource + ":2: lock.concurrency:"}},
		{"a syntax error", "", "[lock\nconcurrency = 3\n", 0, "",
			[]string{ClusterSource + ":2: TOML syntax error: expected '.' or ']' to end table name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(path, []byte("version = 1\n"+tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := LoadWithCluster(path, Trust{}, tt.cluster)
			if len(tt.errs) > 0 {
				if err == nil {
					t.Fatalf("loaded; want an error with %q", tt.errs)
				}
				for _, want := range tt.errs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Config.Lock.Concurrency != tt.concurrency {
				t.Errorf("concurrency %d, want %d", l.Config.Lock.Concurrency, tt.concurrency)
			}
			from := l.origin("lock.concurrency").String()
			if !strings.HasSuffix(from, tt.from) {
				t.Errorf("lock.concurrency from %q, want %q", from, tt.from)
			}
			for _, f := range l.Files {
				if f == ClusterSource {
					t.Errorf("the cluster's settings listed among the files: %q", l.Files)
				}
			}
		})
	}
}

// TestCheckCluster: what `settings apply` validates before it writes.
func TestCheckCluster(t *testing.T) {
	if _, err := CheckCluster("[lock]\nconcurrency = 2\n[[lock.groups]]\nlabel = \"topology.kubernetes.io/zone\"\nmax = 1\n[window]\ndays = [\"sat\"]\n"); err != nil {
		t.Errorf("valid settings refused: %v", err)
	}
	_, err := CheckCluster("[drain]\ntimeout = \"1m\"\n")
	if err == nil || !strings.Contains(err.Error(), "drain.timeout: not a cluster setting") {
		t.Errorf("a host's key: %v", err)
	}
}

// TestClusterSecrets: the cluster's settings never name a host's file,
// carry a secret, or send a host's credentials to a URL of theirs. Each
// case is a way whoever can write the ConfigMap could have had every node
// send, as root, a file's content to a server of their choosing.
func TestClusterSecrets(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "password")
	if err := os.WriteFile(secret, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const url = "[blockers.prometheus]\nurl = \"http://127.0.0.1:9/\"\n"
	hostCreds := "[blockers.prometheus]\nusername = \"kured\"\npassword_file = \"" + secret + "\"\n"
	tests := []struct {
		name, file, cluster string
		errs                []string // each in the error; none: loads
	}{
		{"a password file from the cluster", "", url + "username = \"x\"\npassword_file = \"/var/lib/rancher/k3s/server/token\"\n", []string{
			ClusterSource + ":4: blockers.prometheus.password_file: not a cluster setting (a credential: the cluster's settings never make a host read or send its secrets)",
			ClusterSource + ":3: blockers.prometheus.username: not a cluster setting (a credential",
		}},
		{"a token file from the cluster", "", url + "bearer_token_file = \"/etc/kubernetes/pki/ca.key\"\n", []string{
			ClusterSource + ":3: blockers.prometheus.bearer_token_file: not a cluster setting (a credential",
		}},
		{"a CA file from the cluster", "", url + "ca_file = \"/etc/shadow\"\n", []string{
			ClusterSource + ":3: blockers.prometheus.ca_file: not a cluster setting (it names a file on the host)",
		}},
		{"notification URLs from the cluster", "", "[notify]\nurls = [\"generic+https://example.com/\"]\n", []string{
			ClusterSource + ":2: notify.urls: not a cluster setting (where a host's messages go, with their credentials)",
		}},
		{"a command from the cluster", "", "[health]\ncommand = [\"/bin/sh\", \"-c\", \"id\"]\n", []string{
			ClusterSource + ":2: health.command: not a cluster setting (a command run as root)",
		}},
		{"the cluster's URL with the host's password", hostCreds, url, []string{
			ClusterSource + ":2: blockers.prometheus.url: comes from the cluster's settings, but " + filepath.Join(dir, "config.toml") +
				":4 sets blockers.prometheus.password_file: a host sends its credentials only to a URL from its own files",
			"but " + filepath.Join(dir, "config.toml") + ":3 sets blockers.prometheus.username",
		}},
		{"the cluster's URL with the host's token", "[blockers.prometheus]\nbearer_token_file = \"" + secret + "\"\n", url, []string{
			"blockers.prometheus.url: comes from the cluster's settings, but " + filepath.Join(dir, "config.toml") + ":3 sets blockers.prometheus.bearer_token_file",
		}},
		{"credentials in the cluster's URL", "", "[blockers.prometheus]\nurl = \"https://kured:hunter2@prom.example/\"\n", []string{
			ClusterSource + ":2: blockers.prometheus.url: holds a user name or password: the cluster's settings carry no secret",
		}},
		{"a query in the cluster's URL", "", "[blockers.prometheus]\nurl = \"https://prom.example/?token=abc\"\n", []string{
			ClusterSource + ":2: blockers.prometheus.url: has a query",
		}},
		{"the cluster's URL alone", "", url + "alert_firing_only = true\ntimeout = \"10s\"\n", nil},
		{"the host's URL and password under the cluster's filters", hostCreds + "url = \"https://prom.example/\"\n",
			url + "alert_filter_regexp = \"^Watchdog$\"\n", nil},
		{"credentials in the host's URL", "[blockers.prometheus]\nurl = \"https://kured:pw@prom.example/?token=x\"\n", url, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(path, []byte("version = 1\n"+tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := LoadWithCluster(path, Trust{}, tt.cluster)
			if len(tt.errs) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if l.Config.Blockers.Prometheus.URL.URL() == nil {
					t.Error("no Prometheus URL")
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded (URL %s, password file %q); want an error", l.Config.Blockers.Prometheus.URL, l.Config.Blockers.Prometheus.PasswordFile)
			}
			for _, want := range tt.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the password:\n%v", err)
			}
		})
	}
}

// TestClusterKeysAreLeaves: every allowed key is a leaf of the schema,
// or an array, never a table: a table would let through the keys added
// to it later.
func TestClusterKeysAreLeaves(t *testing.T) {
	for _, k := range ClusterKeys {
		rt := reflect.TypeFor[Config]()
		for _, name := range strings.Split(k.Key, ".") {
			f, ok := fieldsByTag(rt)[name]
			if !ok || rt.Kind() != reflect.Struct {
				t.Fatalf("%s: %q is not a key of the schema", k.Key, name)
			}
			rt = rt.Field(f).Type
		}
		if rt.Kind() == reflect.Struct && !isText(rt) || rt.Kind() == reflect.Map {
			t.Errorf("%s is a table, not a leaf", k.Key)
		}
		if k.Why == "" {
			t.Errorf("%s: no reason given", k.Key)
		}
	}
}
