package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/internal/golden"
)

// golden compares got with testdata/<name>, or rewrites it with -update.

// sameConfig compares configurations through their canonical TOML, which
// writes every field.
func sameConfig(t *testing.T, got, want Config) {
	t.Helper()
	g, err := Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("configurations differ\n--- got\n%s\n--- want\n%s", g, w)
	}
}

func TestExampleIsDefault(t *testing.T) {
	l, err := LoadFiles("../../config.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	sameConfig(t, l.Config, Default())
	// What the cluster's settings may set, the example leaves unset: on
	// a host installed as shipped, the cluster's settings apply.
	for key, o := range l.Origins {
		if clusterKey(key) && key != "version" && key != "lock" {
			t.Errorf("config.toml.example sets %s (%s): it would shadow the cluster's settings", key, o)
		}
	}
	// Every key of the schema must appear in the example, so that each one
	// is documented there.
	data, err := Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if m := valueLine.FindStringSubmatch(line); m != nil {
			// A key the cluster's settings may set is there commented
			// out, so that they apply on a host installed as shipped.
			ex := string(mustRead(t, "../../config.toml.example"))
			if !strings.Contains(ex, "\n"+m[1]+" = ") && !strings.Contains(ex, "\n# "+m[1]+" = ") {
				t.Errorf("key %q is missing from config.toml.example", m[1])
			}
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Lock.Concurrency != 1 || len(c.Lock.Groups) != 1 || c.Lock.Groups[0] != (GroupLimit{ZoneLabel, 1}) {
		t.Errorf("defaults are not the safe ones: concurrency %d, groups %v", c.Lock.Concurrency, c.Lock.Groups)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Default()
	c.Lock.Concurrency = 3
	c.Lock.Groups = append(c.Lock.Groups, GroupLimit{Label: "example.com/rack", Max: 2})
	c.Window.Days = []Weekday{Weekday(time.Saturday), Weekday(time.Sunday)}
	c.Window.Start, c.Window.End = 22*3600, 4*3600+30*60
	c.Window.TimeZone = MustLocation("Europe/Berlin")
	c.Blockers.PodSelectors = []Selector{MustSelector("app in (db,cache),tier!=web")}
	c.Node.PreRebootLabels = map[string]string{"example.com/rebooting": "true"}
	c.Notify.TemplateDrain = MustTemplate("drain {{.Node}}")
	c.Drain.Timeout = Duration(90 * time.Second)
	c.Blockers.Prometheus.URL = mustURL(`https://u:p%22%5C@prom:9090/x?q="a\b"`)
	c.Notify.URLs = []URL{mustURL("slack://hook:T00000000-B00000000-XXXXXXXXXXXXXXXXXXXXXXXX@webhook")}
	data, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := LoadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	sameConfig(t, l.Config, c)
}

// TestBadConfigs loads each broken file in testdata/bad and compares the
// whole error report with its golden file: every problem, with file, key
// and line.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "testdata/bad/dropin/config.toml")
	if len(files) < 11 {
		t.Fatalf("only %d broken configurations", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "testdata/bad/"), ".toml")
		t.Run(name, func(t *testing.T) {
			_, err := Load(f, Trust{})
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Load(%s) = %v, want a configuration error", f, err)
			}
			for _, p := range cerr.Problems {
				if p.File == "" {
					t.Errorf("problem without a file: %s", p)
				}
			}
			golden.Check(t, "bad/"+strings.ReplaceAll(name, "/", "-")+".golden", []byte(err.Error()+"\n"))
		})
	}
}

func TestDropIns(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	main := write("config.toml", "[lock]\nconcurrency = 2\nrelease_delay = \"5m\"\n\n[node.pre_reboot_labels]\n\"example.com/a\" = \"1\"\n")
	write("config.d/20-late.toml", "[lock]\nconcurrency = 4\n")
	write("config.d/10-early.toml", "[lock]\nconcurrency = 3\ngroups = []\n\n[node.pre_reboot_labels]\n\"example.com/b\" = \"2\"\n")
	write("config.d/ignored.conf", "this is not read")

	l, err := Load(main, Trust{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"later file wins", l.Config.Lock.Concurrency, 4},
		{"key kept from earlier file", l.Config.Lock.ReleaseDelay, Duration(5 * time.Minute)},
		{"array replaced whole", len(l.Config.Lock.Groups), 0},
		{"tables merge", len(l.Config.Node.PreRebootLabels), 2},
		{"files in lexical order", strings.Join(l.Files, ","), strings.Join([]string{main, filepath.Join(dir, "config.d/10-early.toml"), filepath.Join(dir, "config.d/20-late.toml")}, ",")},
		{"origin of a key", l.Origins["lock.concurrency"], Origin{File: filepath.Join(dir, "config.d/20-late.toml"), Line: 2}},
		{"origin of a kept key", l.Origins["lock.release_delay"], Origin{File: main, Line: 3}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// TestCheckDropIn: a drop-in checked alone is read over the defaults, with
// its problems reported against the name it is given.
func TestCheckDropIn(t *testing.T) {
	tests := []struct {
		name, text string
		problem    string // "" when valid
	}{
		{"valid", "[lock]\nconcurrency = 2\n", ""},
		{"empty", "", ""},
		{"bad value", "[lock]\nconcurrency = 0\n", "40-x.toml:2: lock.concurrency: must be at least 1, got 0"},
		{"unknown key", "[drain]\ntimout = \"1m\"\n", `40-x.toml:2: drain.timout: unknown key "timout"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := CheckDropIn("40-x.toml", tt.text)
			switch {
			case tt.problem == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.problem == "" && l.Config.Lock.Concurrency < 1:
				t.Errorf("not read over the defaults: %+v", l.Config.Lock)
			case tt.problem != "" && (err == nil || !strings.Contains(err.Error(), tt.problem)):
				t.Errorf("error %v, want %q in it", err, tt.problem)
			}
		})
	}
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "config.toml")
	body := "[lock]\nconcurrency = 2\n\n[[lock.groups]]\nlabel = \"topology.kubernetes.io/zone\"\nmax = 1\n\n[node.pre_reboot_labels]\n\"example.com/rebooting\" = \"true\"\n"
	if err := os.WriteFile(main, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Load(main, Trust{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := l.Render(&b); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "render.golden", bytes.ReplaceAll(b.Bytes(), []byte(dir), []byte("DIR")))
	if l2, err := LoadFiles(writeTemp(t, b.Bytes())); err != nil {
		t.Errorf("rendered configuration does not load: %v", err)
	} else {
		sameConfig(t, l2.Config, l.Config)
	}
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		keys   []string // keys of the problems expected, in order; none for valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"window across midnight", func(c *Config) { c.Window.Start, c.Window.End = 22*3600, 4*3600 }, nil},
		{"empty window", func(c *Config) { c.Window.Start, c.Window.End = 3600, 3600 }, []string{"window.end"}},
		{"24:00 as start", func(c *Config) { c.Window.Start = EndOfDay }, []string{"window.start"}},
		{"no days", func(c *Config) { c.Window.Days = nil }, []string{"window.days"}},
		{"concurrency 0", func(c *Config) { c.Lock.Concurrency = 0 }, []string{"lock.concurrency"}},
		{"group max 0", func(c *Config) { c.Lock.Groups[0].Max = 0 }, []string{"lock.groups[0].max"}},
		{"group without label", func(c *Config) { c.Lock.Groups[0].Label = "" }, []string{"lock.groups[0].label"}},
		{"duplicate group", func(c *Config) { c.Lock.Groups = append(c.Lock.Groups, c.Lock.Groups[0]) }, []string{"lock.groups[1].label"}},
		{"no groups is fine", func(c *Config) { c.Lock.Groups = nil }, nil},
		{"negative ttl", func(c *Config) { c.Lock.TTL = -1 }, []string{"lock.ttl"}},
		{"command method without command", func(c *Config) { c.Reboot.Method, c.Reboot.Command = RebootCommand, nil }, []string{"reboot.command"}},
		{"shell string as argv", func(c *Config) { c.Sentinel.Command = []string{"needs-restarting -r"} }, []string{"sentinel.command"}},
		{"no sentinel", func(c *Config) { c.Sentinel.File = "" }, []string{"sentinel.file"}},
		{"command without exit codes", func(c *Config) {
			c.Sentinel.Command, c.Sentinel.RebootExitCodes = []string{"needs-restarting", "-r"}, nil
		}, []string{"sentinel.reboot_exit_codes"}},
		{"exit code out of range", func(c *Config) { c.Sentinel.RebootExitCodes = []int{256} }, []string{"sentinel.reboot_exit_codes[0]"}},
		{"fractional grace period", func(c *Config) { c.Drain.GracePeriod = Duration(1500 * time.Millisecond) }, []string{"drain.grace_period"}},
		{"reserved self label", func(c *Config) { c.Node.PostRebootLabels = map[string]string{"node-role.kubernetes.io/x": ""} }, []string{`node.post_reboot_labels."node-role.kubernetes.io/x"`}},
		{"allowed node.kubernetes.io label", func(c *Config) { c.Node.PostRebootLabels = map[string]string{"node.kubernetes.io/rebooted": "yes"} }, nil},
		{"claim prefix", func(c *Config) { c.Node.PreRebootLabels = map[string]string{"kured-host.dev/claim": "x"} }, []string{`node.pre_reboot_labels."kured-host.dev/claim"`}},
		{"too many group rules", func(c *Config) {
			for i := range 17 {
				c.Lock.Groups = append(c.Lock.Groups, GroupLimit{Label: fmt.Sprintf("example.com/g%d", i), Max: 1})
			}
		}, []string{"lock.groups"}},
		{"metrics without port", func(c *Config) { c.Metrics.Address = "localhost" }, []string{"metrics.address"}},
		{"metrics port range", func(c *Config) { c.Metrics.Address = ":70000" }, []string{"metrics.address"}},
		{"metrics host a name", func(c *Config) { c.Metrics.Address = "locahost:9779" }, []string{"metrics.address"}},
		{"bad node name", func(c *Config) { c.Kubernetes.NodeName = "Node_1" }, []string{"kubernetes.node_name"}},
		{"relative kubeconfig", func(c *Config) { c.Kubernetes.Kubeconfig = "kubelet.conf" }, []string{"kubernetes.kubeconfig"}},
		{"log format", func(c *Config) { c.Log.Format = "logfmt" }, []string{"log.format"}},
		{"version", func(c *Config) { c.Version = 2 }, []string{"version"}},
		{"prometheus password file", func(c *Config) {
			c.Blockers.Prometheus.URL = mustURL("https://prom:9090")
			c.Blockers.Prometheus.Username, c.Blockers.Prometheus.PasswordFile = "kured", "/etc/kured-host/prometheus.pass"
		}, nil},
		{"password file without user name", func(c *Config) { c.Blockers.Prometheus.PasswordFile = "/p" }, []string{"blockers.prometheus.username"}},
		{"user name without password file", func(c *Config) { c.Blockers.Prometheus.Username = "kured" }, []string{"blockers.prometheus.password_file"}},
		{"password and token", func(c *Config) {
			c.Blockers.Prometheus.Username, c.Blockers.Prometheus.PasswordFile, c.Blockers.Prometheus.BearerTokenFile = "k", "/p", "/t"
		}, []string{"blockers.prometheus.bearer_token_file"}},
		{"relative credential file", func(c *Config) { c.Blockers.Prometheus.BearerTokenFile = "token" }, []string{"blockers.prometheus.bearer_token_file"}},
		{"credentials in the URL and a file", func(c *Config) {
			c.Blockers.Prometheus.URL = mustURL("https://u:p@prom:9090")
			c.Blockers.Prometheus.BearerTokenFile = "/t"
		}, []string{"blockers.prometheus.url"}},
		{"CA file for http", func(c *Config) {
			c.Blockers.Prometheus.URL = mustURL("http://prom:9090")
			c.Blockers.Prometheus.CAFile = "/ca.pem"
		}, []string{"blockers.prometheus.ca_file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.change(&c)
			err := c.Validate()
			var keys []string
			var cerr *Error
			if errors.As(err, &cerr) {
				for _, p := range cerr.Problems {
					keys = append(keys, p.Key)
				}
			} else if err != nil {
				t.Fatalf("Validate() = %v, not a *Error", err)
			}
			if strings.Join(keys, " ") != strings.Join(tt.keys, " ") {
				t.Errorf("problems at %q, want %q (%v)", keys, tt.keys, err)
			}
		})
	}
}

func mustURL(s string) URL {
	var u URL
	if err := u.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return u
}

func TestValueTypes(t *testing.T) {
	tests := []struct {
		in      string
		v       interface{ UnmarshalText([]byte) error }
		want    string // String() of the parsed value; "" means an error is expected
		wantErr bool
	}{
		{"10m", new(Duration), "10m", false},
		{"1h30m", new(Duration), "1h30m", false},
		{"90s", new(Duration), "1m30s", false},
		{"-1s", new(Duration), "-1s", false},
		{"10", new(Duration), "", true},
		{"22:00", new(TimeOfDay), "22:00", false},
		{"5:30:15", new(TimeOfDay), "05:30:15", false},
		{"24:00", new(TimeOfDay), "24:00", false},
		{"24:01", new(TimeOfDay), "", true},
		{"12:60", new(TimeOfDay), "", true},
		{"12", new(TimeOfDay), "", true},
		{"noon", new(TimeOfDay), "", true},
		{"mo", new(Weekday), "mon", false},
		{"Sunday", new(Weekday), "sun", false},
		{"SAT", new(Weekday), "sat", false},
		{"s", new(Weekday), "", true},
		{"funday", new(Weekday), "", true},
		{"Europe/Berlin", new(Location), "Europe/Berlin", false},
		{"", new(Location), "", true},
		{"app=db,tier notin (web)", new(Selector), "app=db,tier notin (web)", false},
		{"app in (", new(Selector), "", true},
		{"^Kube", new(Regexp), "^Kube", false},
		{"(", new(Regexp), "", true},
		{"https://prom:9090/", new(URL), "https://prom:9090/", false},
		{"//prom:9090", new(URL), "", true},
		{"no scheme", new(URL), "", true},
		{"Rebooting {{.Node}}", new(Template), "Rebooting {{.Node}}", false},
		{"{{.Host}}", new(Template), "", true},
		{"{{", new(Template), "", true},
		{"Rebooting node %s", new(Template), "", true},
		{"{{if .Reason}}failed: %s{{end}}", new(Template), "", true},
		{`Rebooting {{printf "%s" .Node}}`, new(Template), `Rebooting {{printf "%s" .Node}}`, false},
	}
	for _, tt := range tests {
		err := tt.v.UnmarshalText([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("%T %q: err = %v, want error %v", tt.v, tt.in, err, tt.wantErr)
			continue
		}
		if err == nil {
			if s := tt.v.(interface{ String() string }).String(); s != tt.want {
				t.Errorf("%T %q: parsed as %q, want %q", tt.v, tt.in, s, tt.want)
			}
		}
	}
}

// TestKuredTemplate: kured's printf-style template is refused with the Go
// template to write, naming the file, line and key.
func TestKuredTemplate(t *testing.T) {
	path := writeTemp(t, []byte("[notify]\ntemplate_uncordon = \"Node %s rebooted & uncordoned successfully!\"\n"))
	_, err := LoadFiles(path)
	want := path + `:2: notify.template_uncordon: "Node %s rebooted & uncordoned successfully!" has kured's %s, which is not replaced here: ` +
		`write the Go template "Node {{.Node}} rebooted & uncordoned successfully!"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant it to hold %s", err, want)
	}
}

func TestTemplateRender(t *testing.T) {
	got, err := MustTemplate("node {{.Node}}: {{.Reason}}").Render(MessageData{Node: "n1", Reason: "drain timed out"})
	if err != nil || got != "node n1: drain timed out" {
		t.Errorf("Render = %q, %v", got, err)
	}
}

func TestUnknownKeySuggestions(t *testing.T) {
	tests := []struct {
		file string
		want string
	}{
		{"[lock]\nconcurency = 2\n", `did you mean "concurrency"?`},
		{"concurrency = 2\n", `did you mean "lock.concurrency"?`},
		{"[window]\nreboot-days = [\"mo\"]\n", "kured's --reboot-days is window.days here"},
		{"[window]\nreboot_days = [\"mo\"]\n", "kured's --reboot-days is window.days here"},
		{"lock-annotation = \"x\"\n", "kured's --lock-annotation has no equivalent here"},
		{"[lock]\nzzz = 1\n", `unknown key "zzz"`},
	}
	for _, tt := range tests {
		_, err := LoadFiles(writeTemp(t, []byte(tt.file)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want a message containing %q", tt.file, err, tt.want)
		}
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"), Trust{})
	var cerr *Error
	if !errors.As(err, &cerr) || !strings.Contains(err.Error(), "file not found") {
		t.Fatalf("got %v", err)
	}
}

// TestWarnings: credentials over http:// are valid but warned about.
func TestWarnings(t *testing.T) {
	tests := []struct {
		name, file string
		want       string // "" for no warning
	}{
		{"https with a password", "url = \"https://prom/\"\nusername = \"u\"\npassword_file = \"SECRET\"\n", ""},
		{"http without credentials", "url = \"http://prom/\"\n", ""},
		{"http with a password file", "url = \"http://prom/\"\nusername = \"u\"\npassword_file = \"SECRET\"\n",
			"blockers.prometheus.url http://prom/ is http://: the password of blockers.prometheus.password_file cross the network in the clear"},
		{"http with a token", "url = \"http://prom/\"\nbearer_token_file = \"SECRET\"\n", "the token of blockers.prometheus.bearer_token_file"},
		{"http with a password in the URL", "url = \"http://u:secret@prom/\"\n", "http://…@prom/ is http://: the user name and password in the URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(secret, []byte("s3cr3t\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := CheckDropIn("test.toml", "[blockers.prometheus]\n"+strings.ReplaceAll(tt.file, "SECRET", secret))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(l.Config.Warnings(), "\n")
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("warnings %q, want %q", got, tt.want)
			}
			if strings.Contains(got, "secret") {
				t.Errorf("the warning shows the password: %q", got)
			}
		})
	}
}
