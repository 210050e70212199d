package fromkured

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/internal/golden"
)

// TestFlagTable: every flag of config.KuredOptions, and no other, has a
// kind that can be set, a default and a converter here.
func TestFlagTable(t *testing.T) {
	for _, o := range config.KuredOptions {
		d, ok := flagTable[o.Flag]
		switch {
		case !ok:
			t.Errorf("%s is in config.KuredOptions but not in flagTable", o.Flag)
		case d.conv == nil:
			t.Errorf("%s has no converter", o.Flag)
		case setters[d.kind] == nil:
			t.Errorf("%s is of a kind with no setter", o.Flag)
		case o.Key == "" && !d.commentOnly:
			t.Errorf("%s has no key in config.KuredOptions but is not commentOnly", o.Flag)
		}
	}
	for flag := range flagTable {
		if optionIndex(flag) == len(config.KuredOptions) {
			t.Errorf("%s is in flagTable but not in config.KuredOptions", flag)
		}
	}
}

func readSource(t *testing.T, file string) Source {
	t.Helper()
	f, err := os.Open("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := ReadDaemonSet(f)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestConvert converts realistic command lines; each drop-in is a golden
// file, and loads (Convert checks it; checked again here as the
// command's check does).
func TestConvert(t *testing.T) {
	tests := []struct {
		name     string
		file     string   // a DaemonSet in testdata
		args     []string // or kured's flags
		warnings []string // each is in one of the warnings
	}{
		{name: "chart-defaults", file: "chart-defaults.yaml"},
		{name: "window-across-midnight", args: []string{
			"--reboot-days=fr,sa", "--start-time=10pm", "--end-time=04:59:59", "--time-zone=Europe/Berlin"}},
		{name: "concurrency-blockers-prometheus", args: []string{
			"--concurrency=2",
			"--blocking-pod-selector=app=backup", "--blocking-pod-selector", "team=db,tier!=cache",
			"--prometheus-url=http://prometheus-server.monitoring.svc:9090",
			"--alert-filter-regexp=^(Watchdog|InfoInhibitor)$", "--alert-filter-match-only=false", "--alert-firing-only"}},
		{name: "notify-slack-deprecated", args: []string{
			"--slack-hook-url=https://hooks.slack.com/services/T00000000/B11110000/XXXXXXXXXXXXXXXXXXXXXXXX", "--slack-username=prod", "--slack-channel=alerting"}},
		{name: "notify-url", args: []string{
			"--notify-url=\"smtp://kured:s3cret@mail.example.com:587/?from=kured@example.com&to=ops@example.com\"",
			"--slack-hook-url=https://hooks.slack.com/services/T00000000/B11110000/XXXXXXXXXXXXXXXXXXXXXXXX"}},
		{name: "marks-and-templates", args: []string{
			"--annotate-nodes",
			"--pre-reboot-node-labels=example.com/rebooting=true,node-role.kubernetes.io/maintenance=true",
			"--post-reboot-node-labels=example.com/rebooting=false",
			"--message-template-drain=Draining node %s",
			"--message-template-reboot=Rebooting %s (100%% planned)",
			"--message-template-uncordon=Node is back"},
			warnings: []string{`node.pre_reboot_labels."node-role.kubernetes.io/maintenance": a node may not set kubernetes.io labels on itself`}},
		{name: "reboot-command", args: []string{
			"--reboot-command=/usr/bin/sh -c 'sleep 5 && /sbin/reboot'",
			"--reboot-sentinel-command", `/usr/bin/needs-restarting -r`,
			"--reboot-sentinel=/var/run/reboot-required",
			"--drain-grace-period=-1", "--drain-timeout=30m", "--skip-wait-for-delete-timeout=60",
			"--force-reboot", "--reboot-delay=90s", "--lock-ttl=0", "--lock-release-delay=5m"}},
		{name: "reboot-signal", args: []string{"--reboot-method=signal", "--reboot-signal=39", "--reboot-command=/bin/true"}},
		{name: "unknown-flag", args: []string{
			"--period=30m", "--reboot-dayz=mo", "--max-pods", "10", "leftover", "--prefer-no-schedule-taint=weave.works/kured-node-reboot"},
			warnings: []string{"--reboot-dayz=mo: not a flag of kured 1.23", "--max-pods=10: not a flag", `argument "leftover"`}},
		{name: "refused-values", args: []string{
			"--period=often", "--start-time=25:00", "--reboot-days=mo,someday", "--time-zone=Mars/Olympus"},
			warnings: []string{"--period=often: not converted", "--start-time=25:00: not converted", `kured refuses "someday"`, "--time-zone=Mars/Olympus: not converted"}},
		{name: "list-json", file: "list.json",
			warnings: []string{
				"--notify-url=$(NOTIFY_URL): not converted: its value comes from $(NOTIFY_URL), from Secret kured-notify, key url",
				"KURED_BLOCKING_POD_SELECTOR=app=backup: kured does not read KURED_BLOCKING_POD_SELECTOR",
				"envFrom Secret kured-env"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := FromArgs(tt.args)
			if tt.file != "" {
				src = readSource(t, tt.file)
			}
			res, err := Convert(src)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tt.name+".toml", res.DropIn)
			if _, err := config.CheckDropIn(tt.name+".toml", string(res.DropIn)); err != nil {
				t.Errorf("the drop-in does not load: %v", err)
			}
			for _, w := range tt.warnings {
				if !slices.ContainsFunc(res.Warnings, func(s string) bool { return strings.Contains(s, w) }) {
					t.Errorf("no warning has %q:\n%s", w, strings.Join(res.Warnings, "\n"))
				}
			}
			if len(tt.warnings) == 0 && len(res.Warnings) > 0 {
				t.Errorf("unexpected warnings:\n%s", strings.Join(res.Warnings, "\n"))
			}
		})
	}
}

// TestFlagForms: kured's flag syntax in its forms gives the same drop-in.
func TestFlagForms(t *testing.T) {
	want := []string{"--period=2h", "--drain-grace-period=-1", "--force-reboot", "--reboot-days=mo,tu", "--reboot-days=we", "--blocking-pod-selector=app=a"}
	forms := map[string][]string{
		"--flag value":   {"--period", "2h", "--drain-grace-period", "-1", "--force-reboot", "--reboot-days", "mo,tu", "--reboot-days", "we", "--blocking-pod-selector", "app=a"},
		"-flag=value":    {"-period=2h", "-drain-grace-period=-1", "-force-reboot", "-reboot-days=mo,tu", "-reboot-days=we", "-blocking-pod-selector=app=a"},
		"--flag=true":    {"--period=2h", "--drain-grace-period=-1", "--force-reboot=true", "--reboot-days=mo,tu", "--reboot-days=we", "--blocking-pod-selector=app=a"},
		"scalar repeats": {"--period=1m", "--period=2h", "--drain-grace-period=30", "--drain-grace-period=-1", "--force-reboot=false", "--force-reboot", "--reboot-days=mo,tu", "--reboot-days=we", "--blocking-pod-selector=app=a"},
	}
	base, err := Convert(FromArgs(want))
	if err != nil {
		t.Fatal(err)
	}
	keys := keyLines(string(base.DropIn))
	for _, k := range []string{`period = "2h"`, `force_reboot = true`, `days = ["mon", "tue", "wed"]`, `pod_selectors = ["app=a"]`} {
		if !slices.Contains(keys, k) {
			t.Errorf("%s: lacks %q:\n%s", "--flag=value", k, base.DropIn)
		}
	}
	for name, args := range forms {
		t.Run(name, func(t *testing.T) {
			res, err := Convert(FromArgs(args))
			if err != nil {
				t.Fatal(err)
			}
			if got := keyLines(string(res.DropIn)); !slices.Equal(got, keys) {
				t.Errorf("keys\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(keys, "\n"))
			}
		})
	}
}

// keyLines are the lines of a drop-in that are not comments.
func keyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// TestReadCommandLine: what kured's parser does with the odd cases.
func TestReadCommandLine(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		flag  string
		text  string
		list  []string
		given bool
	}{
		{"bool then a word: the word is not its value", []string{"--force-reboot", "false"}, "--force-reboot", "true", nil, true},
		{"bool false", []string{"--annotate-nodes=false"}, "--annotate-nodes", "false", nil, true},
		{"slice replaces the default", []string{"--reboot-days=mo"}, "--reboot-days", "", []string{"mo"}, true},
		{"slice appends on repeat", []string{"--reboot-days=mo", "--reboot-days=tu,we"}, "--reboot-days", "", []string{"mo", "tu", "we"}, true},
		{"array keeps commas", []string{"--blocking-pod-selector=a=1,b=2"}, "--blocking-pod-selector", "", []string{"a=1,b=2"}, true},
		{"last scalar wins", []string{"--concurrency=2", "--concurrency=0x3"}, "--concurrency", "3", nil, true},
		{"after -- nothing is a flag", []string{"--", "--concurrency=2"}, "--concurrency", "1", nil, false},
		{"quotes read as empty", []string{`--drain-pod-selector=""`}, "--drain-pod-selector", "", nil, true},
		{"default when not given", nil, "--period", "1h0m0s", nil, false},
		{"a value from $(NAME) of a Secret, then a plain one", []string{"--period=$(P)", "--period=2h"}, "--period", "2h", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := newCmdline()
			cl.parseArgs(tt.args, newExpander([]corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{Key: "p"}}}}))
			v := cl.values[tt.flag]
			if v.unread != "" {
				t.Errorf("still unread: %s", v.unread)
			}
			if v.text != tt.text || v.given != tt.given || (tt.list != nil && !slices.Equal(v.list, tt.list)) {
				t.Errorf("got text %q list %q given %v; want %q %q %v", v.text, v.list, v.given, tt.text, tt.list, tt.given)
			}
		})
	}
}

// TestReadRefused: a value kured refuses leaves the flag at its default
// with the reason, and pflag and kured read integers differently.
func TestReadRefused(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []corev1.EnvVar
		flag string
		text string
		err  string // "" for a value kured takes
	}{
		{name: "a flag without its argument", args: []string{"--period"},
			flag: "--period", text: "1h0m0s", err: "flag needs an argument"},
		{name: "an argument's integer in any base", args: []string{"--concurrency=0x10"},
			flag: "--concurrency", text: "16"},
		{name: "a variable's integer", env: []corev1.EnvVar{{Name: "KURED_CONCURRENCY", Value: "3"}},
			flag: "--concurrency", text: "3"},
		{name: "a variable's integer in base 10 only", env: []corev1.EnvVar{{Name: "KURED_CONCURRENCY", Value: "0x10"}},
			flag: "--concurrency", text: "1", err: `strconv.Atoi: parsing "0x10": invalid syntax`},
		{name: "a boolean refused", args: []string{"--annotate-nodes=maybe"},
			flag: "--annotate-nodes", text: "false", err: `strconv.ParseBool: parsing "maybe": invalid syntax`},
		{name: "a boolean written back canonical", args: []string{"--annotate-nodes=T"},
			flag: "--annotate-nodes", text: "true"},
		{name: "a variable's duration refused", env: []corev1.EnvVar{{Name: "KURED_PERIOD", Value: "often"}},
			flag: "--period", text: "1h0m0s", err: `time: invalid duration "often"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := newCmdline()
			ex := newExpander(tt.env)
			cl.parseArgs(tt.args, ex)
			cl.parseEnv(tt.env, ex)
			if cl.err != nil {
				t.Fatal(cl.err)
			}
			v := cl.values[tt.flag]
			err := ""
			if v.err != nil {
				err = v.err.Error()
			}
			if !v.given || v.text != tt.text || err != tt.err {
				t.Errorf("got text %q, error %q, given %v; want %q, %q, true", v.text, err, v.given, tt.text, tt.err)
			}
		})
	}
}

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{"/bin/systemctl reboot", []string{"/bin/systemctl", "reboot"}, false},
		{`  /usr/bin/sh  -c 'sleep 5; reboot'`, []string{"/usr/bin/sh", "-c", "sleep 5; reboot"}, false},
		{`echo "a \"b\" c" d\ e`, []string{"echo", `a "b" c`, "d e"}, false},
		{`x $HOME|y # a comment`, []string{"x", "$HOME|y"}, false},
		{`a#b ''`, []string{"a#b", ""}, false},
		{"a # to the end of the line\n'b' # and another", []string{"a", "b"}, false},
		{`'open`, nil, true},
		{`"open`, nil, true},
		{`end\`, nil, true},
		{"", nil, false},
	}
	for _, tt := range tests {
		got, err := splitWords(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q (error %v)", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestGoTemplate(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"Draining node %s", "Draining node {{.Node}}"},
		{"Node %v: 100%% done", "Node {{.Node}}: 100% done"},
		{"%q rebooting", `{{printf "%q" .Node}} rebooting`},
		{"{{not a template}} %s", `{{"{{"}}not a template}} {{.Node}}`},
		{"count %d", "count %d"},
		{"no verb", "no verb"},
	}
	for _, tt := range tests {
		got, _ := goTemplate(tt.in)
		if got != tt.want {
			t.Errorf("goTemplate(%q) = %q, want %q", tt.in, got, tt.want)
		}
		var tmpl config.Template
		if err := tmpl.UnmarshalText([]byte(got)); err != nil {
			t.Errorf("goTemplate(%q) is not a valid message template: %v", tt.in, err)
		}
	}
}

func TestWindow(t *testing.T) {
	tests := []struct {
		start, end string
		want       window
	}{
		{"0:00", "23:59:59", window{start: 0, end: 86400}},
		{"22:00", "04:59:59", window{start: 79200, end: 18000, crosses: true}},
		{"10pm", "4am", window{start: 79200, end: 14400, crosses: true}},
		{"11:30pm", "23:30", window{start: 84600, end: 84600, empty: true}},
		{"05:00", "04:59:59", window{start: 18000, end: 18000, whole: true}},
	}
	for _, tt := range tests {
		c := &conv{cl: newCmdline()}
		c.cl.parseArgs([]string{"--start-time=" + tt.start, "--end-time=" + tt.end}, nil)
		got, ok := c.window()
		if !ok || got != tt.want {
			t.Errorf("%s to %s: %+v (%v), want %+v", tt.start, tt.end, got, ok, tt.want)
		}
	}
}

func TestHostPath(t *testing.T) {
	src := Source{InPod: true, Mounts: []Mount{
		{Path: "/sentinel", Volume: "sentinel", HostPath: "/var/run"},
		{Path: "/sentinel/sub", Volume: "sub", HostPath: "/srv/flags"},
		{Path: "/cache", Volume: "cache"},
	}}
	tests := []struct {
		in, want, err string
	}{
		{"/sentinel/reboot-required", "/var/run/reboot-required", ""},
		{"/sentinel/sub/x", "/srv/flags/x", ""},
		{"/sentinelx", "", "on no volume"},
		{"/cache/x", "", `volume "cache", which is not a hostPath`},
	}
	for _, tt := range tests {
		got, _, err := src.hostPath(tt.in)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("hostPath(%q) = %q, %v; want %q, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
	if got, _, _ := (Source{}).hostPath("/x"); got != "/x" {
		t.Errorf("outside a pod, a path is the host's: got %q", got)
	}
}

// TestReadDaemonSetErrors: input that holds no kured is an ErrInput that
// says what it found.
func TestReadDaemonSetErrors(t *testing.T) {
	chart, err := os.ReadFile("testdata/chart-defaults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	other := strings.ReplaceAll(string(chart), "name: kured\n  namespace", "name: other\n  namespace")
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "the input is empty"},
		{"not YAML", "{{{", "neither YAML nor JSON"},
		{"a Deployment", readFile(t, "deployment.yaml"), "holds no DaemonSet, only Deployment kured"},
		{"no kured container", readFile(t, "two-containers.yaml"), "DaemonSet kube-system/reboots has no container named kured among reboot-daemon, sidecar"},
		{"several DaemonSets", other + "\n---\n" + strings.ReplaceAll(other, "name: other\n", "name: third\n"), "several DaemonSets (kube-system/other, kube-system/third)"},
		{"a plain string", "hello", "not a Kubernetes object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadDaemonSet(strings.NewReader(tt.in))
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrInput with %q", err, tt.want)
			}
		})
	}
	// helm template's output: several documents, one the DaemonSet.
	multi := "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: kured\n---\n" + string(chart) + "\n---\n"
	if src, err := ReadDaemonSet(strings.NewReader(multi)); err != nil || src.Name != "DaemonSet kube-system/kured, container kured" {
		t.Errorf("several documents: %v, %q", err, src.Name)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNoSecretInComments: credentials in URLs are in the keys' values,
// which must hold them, and nowhere else: not in comments, not in
// warnings.
func TestNoSecretInComments(t *testing.T) {
	secrets := []string{"pr0mPassw0rd", "xoxbT0ken", "B1111", "s3cret", "K3YK3Y"}
	res, err := Convert(FromArgs([]string{
		"--prometheus-url=https://alice:pr0mPassw0rd@prom.example:9090",
		"--notify-url=slack://hook:XOXBT0KEN-B00000000-xoxbT0kenxoxbT0ken123456@webhook",
		"--notify-url=smtp://kured:s3cret@mail.example.com:587/?fromaddress=kured@example.com&toaddresses=ops@example.com",
		"--slack-hook-url=https://hooks.slack.com/services/T00000000/B11110000/XXXXXXXXXXXXXXXXXXXXXXXX",
		"--notify-urls=ifttt://K3YK3Y/?events=reboot",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Secrets {
		t.Error("Secrets is false for a drop-in with URLs")
	}
	for _, line := range strings.Split(string(res.DropIn), "\n") {
		if strings.HasPrefix(line, "#") {
			for _, s := range secrets {
				if strings.Contains(line, s) {
					t.Errorf("a comment shows %q: %s", s, line)
				}
			}
		}
	}
	for _, w := range res.Warnings {
		for _, s := range secrets {
			if strings.Contains(w, s) {
				t.Errorf("a warning shows %q: %s", s, w)
			}
		}
	}
	if !strings.Contains(string(res.DropIn), "s3cret") {
		t.Errorf("the notify URL's value is not in the drop-in:\n%s", res.DropIn)
	}
}
