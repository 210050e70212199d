package config

import (
	"os"
	"path/filepath"
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
			[]string{ClusterSource + ":4: sentinel.period: not a cluster setting: the cluster's settings may set only lock.concurrency, lock.groups, window, blockers; set sentinel.period in each host's files"}},
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
