package fromkured

import (
	"errors"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/printable"
)

// TestUnprintableRefused: a value that holds a control character, a
// bidirectional override or isolate, another invisible character or a
// byte that is not UTF-8 stops the conversion with an error that names
// where it is, the character's place and the character, all escaped;
// never the drop-in's "does not load", and no secret shown.
func TestUnprintableRefused(t *testing.T) {
	chart := readFile(t, "chart-defaults.yaml")
	env := func(src Source, kv ...string) Source {
		for i := 0; i < len(kv); i += 2 {
			src.Env = append(src.Env, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return src
	}
	tests := []struct {
		name string
		src  func() Source
		// or: chart-defaults.yaml with old replaced by new, refused by
		// ReadDaemonSet or Convert
		old, new string
		want     []string // in the error
		not      string   // a secret the error must not show
	}{
		{name: "ESC in a flag's value", src: func() Source { return FromArgs([]string{"--period=1h\x1b"}) },
			want: []string{`kured's argument 1 (--period=1h\x1b): character 12 is a control character (\x1b)`}},
		{name: "a terminal escape in the next word", src: func() Source { return FromArgs([]string{"--period", "1h", "--reboot-sentinel", "/run/x\x1b[2J"}) },
			want: []string{`kured's argument 4, the value of --reboot-sentinel (/run/x\x1b[2J): character 7 is a control character (\x1b)`}},
		{name: "a carriage return in a secret", src: func() Source { return FromArgs([]string{"--notify-url=slack://xoxbT0ken@chan\r"}) },
			want: []string{`kured's argument 1 (--notify-url=slack://…): character 36 is a control character (\r)`}, not: "xoxbT0ken"},
		{name: "a bidirectional override", src: func() Source { return FromArgs([]string{"--blocking-pod-selector=app=db\u202e"}) },
			want: []string{`(--blocking-pod-selector=app=db\u202e): character 31 is a bidirectional control (\u202e)`}},
		{name: "a bidirectional isolate in an unknown flag", src: func() Source { return FromArgs([]string{"--no-such\u2066=x"}) },
			want: []string{`kured's argument 1 (--no-such\u2066=x): character 10 is a bidirectional control (\u2066)`}},
		{name: "a zero-width space", src: func() Source { return FromArgs([]string{"--node-id=ad\u200bmin"}) },
			want: []string{`character 13 is an invisible format character (\u200b)`}},
		{name: "a word that is not a flag", src: func() Source { return FromArgs([]string{"leftover\x1b"}) },
			want: []string{`kured's argument 1 (leftover\x1b): character 9 is a control character (\x1b)`}},
		{name: "the next word of an unknown flag, a URL in it hidden", src: func() Source {
			return FromArgs([]string{"--prometheus-urll", "https://alice:pr0mPassw0rd@prom/\x1b"})
		}, want: []string{`kured's argument 2, the value of --prometheus-urll (https://…): character 33 is a control character (\x1b)`}, not: "pr0mPassw0rd"},
		{name: "not UTF-8, after --", src: func() Source { return FromArgs([]string{"--", "a\xffb"}) },
			want: []string{`kured's argument 2 (a\xffb): character 2 is a byte that is not UTF-8 (\xff)`}},
		{name: "a tab outside a command", src: func() Source { return FromArgs([]string{"--time-zone=Europe/Paris\t"}) },
			want: []string{`character 25 is a control character (\t)`}},
		{name: "a variable's value", src: func() Source { return env(FromArgs(nil), "KURED_PERIOD", "1h\x1b[2J") },
			want: []string{`variable KURED_PERIOD (KURED_PERIOD=1h\x1b[2J): character 16 is a control character (\x1b)`}},
		{name: "a variable's name", src: func() Source { return env(FromArgs(nil), "KURED_\x1b]0;x\x07", "1") },
			want: []string{`the name of a variable (KURED_\x1b]0;x\x07): character 7 is a control character (\x1b)`}},
		{name: "a $(NAME) reference brings it in", src: func() Source { return env(FromArgs([]string{"--period=$(P)"}), "P", "1h\u202e") },
			want: []string{`kured's argument 1 once its $(NAME) references are expanded (--period=1h\u202e): character 12 is a bidirectional control (\u202e)`}},
		{name: "the DaemonSet's arguments", old: "- --log-format=text", new: "- \"--log-format=text\\e[2J\"",
			want: []string{`kured's argument 6 (--log-format=text\x1b[2J): character 18 is a control character (\x1b)`}},
		{name: "the DaemonSet's name", old: "name: kured\n  namespace", new: "name: \"kured\\e[2J\"\n  namespace",
			want: []string{`the DaemonSet's metadata.name (kured\x1b[2J): character 6 is a control character (\x1b)`}},
		{name: "the container's name", old: "- name: kured\n          image", new: "- name: \"kured\\u202e\"\n          image",
			want: []string{`the DaemonSet's spec.template.spec.containers[0].name (kured\u202e)`}},
		{name: "a hostPath", old: "path: /var/run\n", new: "path: \"/var/run\\r\"\n",
			want: []string{`the DaemonSet's spec.template.spec.volumes[0].hostPath.path (/var/run\r)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.old != "" {
				in := strings.Replace(chart, tt.old, tt.new, 1)
				if in == chart {
					t.Fatalf("chart-defaults.yaml has no %q", tt.old)
				}
				var src Source
				if src, err = ReadDaemonSet(strings.NewReader(in)); err == nil {
					_, err = Convert(src)
				}
			} else {
				_, err = Convert(tt.src())
			}
			if !errors.Is(err, ErrUnprintable) {
				t.Fatalf("error %v, want ErrUnprintable", err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\nlacks\n%s", msg, w)
				}
			}
			if printable.String(msg) != msg {
				t.Errorf("the error holds characters that do not print: %q", msg)
			}
			if strings.Contains(msg, "does not load") || tt.not != "" && strings.Contains(msg, tt.not) {
				t.Errorf("error %q", msg)
			}
		})
	}
}

// TestCommandSpacing: a command's words may be separated by tabs and
// line feeds, as kured splits them: converted, and shown escaped.
func TestCommandSpacing(t *testing.T) {
	res, err := Convert(FromArgs([]string{"--reboot-command=/bin/systemctl\treboot\n--force"}))
	if err != nil {
		t.Fatal(err)
	}
	text := string(res.DropIn)
	if !strings.Contains(text, `command = ["/bin/systemctl", "reboot", "--force"]`) || !strings.Contains(text, `# --reboot-command=/bin/systemctl\treboot\n--force`) {
		t.Errorf("drop-in:\n%s", text)
	}
	if printable.Lines(text) != text {
		t.Errorf("the drop-in holds characters that do not print:\n%q", text)
	}
}

// FuzzConvert: whatever kured's arguments and variables hold, the
// conversion does not panic, refuses only with ErrUnprintable (never
// with a drop-in that does not load), and writes nothing that does not
// print: not in its error, its warnings or the drop-in.
func FuzzConvert(f *testing.F) {
	f.Add("--period=1h\x1b", "--reboot-days=mo", "KURED_PERIOD", "2h")
	f.Add("--reboot-command", "/bin/sh\t-c\n'x'", "KURED_NOTIFY_URL", "slack://t@c\u202e")
	f.Add("--blocking-pod-selector=a=b\u202e", "--", "KURED_NO_SUCH", "\xff")
	f.Add("--notify-url=$(X)", "x\r", "X", "generic+https://h/\x1b[2J")
	f.Add("--start-time=\u200b9am", "--time-zone=Europe/Berlin", "KURED_END_TIME", "5pm")
	f.Add("--pre-reboot-node-labels=a=\u2028b", "-x", "KURED_LOCK_TTL", "1h")
	f.Fuzz(func(t *testing.T, a, b, name, val string) {
		src := FromArgs([]string{a, b})
		src.Env = []corev1.EnvVar{{Name: name, Value: val}, {Name: "KURED_PERIOD", Value: "$(" + name + ")"}}
		checkConverted(t, src)
	})
}

// FuzzReadDaemonSet: the same for any input as a DaemonSet.
func FuzzReadDaemonSet(f *testing.F) {
	for _, name := range []string{"chart-defaults.yaml", "two-containers.yaml", "list.json", "deployment.yaml"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	chart, _ := os.ReadFile("testdata/chart-defaults.yaml")
	f.Add([]byte(strings.Replace(string(chart), "- --log-format=text", "- \"--log-format=text\\e[2J\"", 1)))
	f.Add([]byte(strings.Replace(string(chart), "name: kured\n  namespace", "name: \"ku\\u202ered\"\n  namespace", 1)))
	f.Add([]byte("kind: Deployment\nmetadata:\n  name: \"a\\eb\"\n"))
	f.Add([]byte("\x1b[2J{{{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src, err := ReadDaemonSet(strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, ErrInput) && !errors.Is(err, ErrUnprintable) {
				t.Fatalf("ReadDaemonSet: %v, want ErrInput or ErrUnprintable", err)
			}
			if msg := err.Error(); printable.String(msg) != msg {
				t.Fatalf("the error holds characters that do not print: %q", msg)
			}
			return
		}
		checkConverted(t, src)
	})
}

func checkConverted(t *testing.T, src Source) {
	t.Helper()
	res, err := Convert(src)
	if err != nil {
		if !errors.Is(err, ErrUnprintable) {
			t.Fatalf("Convert: %v, want nil or ErrUnprintable", err)
		}
		if msg := err.Error(); printable.String(msg) != msg {
			t.Fatalf("the error holds characters that do not print: %q", msg)
		}
		return
	}
	if text := string(res.DropIn); printable.Lines(text) != text {
		t.Fatalf("the drop-in holds characters that do not print:\n%q", text)
	}
	if _, err := config.CheckDropIn("drop-in", string(res.DropIn)); err != nil {
		t.Fatalf("the drop-in does not load: %v\n%s", err, res.DropIn)
	}
	for _, w := range res.Warnings {
		if printable.String(w) != w {
			t.Fatalf("a warning holds characters that do not print: %q", w)
		}
	}
}
