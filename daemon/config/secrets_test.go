package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Secrets that the tests below put in URLs; none may be shown.
var secretWords = []string{"pr0mPassw0rd", "qu3ryT0ken", "K3YK3YK3Y", "xoxbT0ken", "alice"}

func noSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, w := range secretWords {
		if strings.Contains(s, w) {
			t.Errorf("%s shows %q:\n%s", what, w, s)
		}
	}
}

const secretConfig = `[blockers.prometheus]
url = "https://alice:pr0mPassw0rd@prom.example:9090/?token=qu3ryT0ken"

[notify]
urls = ["ifttt://K3YK3YK3Y/?events=reboot", "slack://hook:XOXBT0KEN-B00000000-xoxbT0kenxoxbT0ken123456@webhook", "generic+https://hooks.example.com/hook"]
`

// TestRenderRedacts: check --config-only shows every URL redacted, says
// so, and Marshal (the file writer) still keeps them whole.
func TestRenderRedacts(t *testing.T) {
	path := writeTemp(t, []byte(secretConfig))
	l, err := LoadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := l.Render(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	noSecret(t, "Render", out)
	for _, want := range []string{
		"# URLs are shown redacted",
		`url = "https://…@prom.example:9090/…"  # redacted; ` + path + ":2",
		`urls = ["ifttt://…", "slack://…", "generic+https://hooks.example.com/…"]  # redacted; ` + path + ":5",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Render lacks %q:\n%s", want, out)
		}
	}
	if !l.Config.Blockers.Prometheus.URL.Redacted() {
		t.Error("Render changed the loaded configuration's URL")
	}
	data, err := Marshal(l.Config)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := LoadFiles(writeTemp(t, data))
	if err != nil {
		t.Fatal(err)
	}
	sameConfig(t, l2.Config, l.Config)
	for _, w := range []string{"pr0mPassw0rd", "K3YK3YK3Y", "xoxbT0ken"} {
		if !strings.Contains(string(data), w) {
			t.Errorf("after Render, Marshal lost %q:\n%s", w, data)
		}
	}
}

// TestURLShowsItselfRedacted: fmt, slog (text and JSON) and JSON all show
// the redacted form.
func TestURLShowsItselfRedacted(t *testing.T) {
	l, err := LoadFiles(writeTemp(t, []byte(secretConfig)))
	if err != nil {
		t.Fatal(err)
	}
	u := l.Config.Blockers.Prometheus.URL
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "url", u, "urls", l.Config.Notify.URLs)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "url", u, "notify", l.Config.Notify)
	js, err := json.Marshal(l.Config.Blockers)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{
		"fmt":  fmt.Sprintf("%s %v %+v %v", u, u, l.Config.Blockers.Prometheus, l.Config.Notify.URLs),
		"slog": logs.String(),
		"json": string(js),
	} {
		noSecret(t, what, s)
		if !strings.Contains(s, "prom.example:9090") && what != "slog" {
			t.Errorf("%s does not show the host: %s", what, s)
		}
	}
}

// TestURLErrorsHideTheValue: a URL that does not parse, has no scheme or
// has the wrong type is not repeated in the error.
func TestURLErrorsHideTheValue(t *testing.T) {
	for _, body := range []string{
		"[blockers.prometheus]\nurl = \"https://alice:pr0m/Passw0rd@h:9090/\"\n",
		"[blockers.prometheus]\nurl = \"alice-pr0mPassw0rd\"\n",
		"[notify]\nurls = \"slack://xoxbT0ken@x\"\n",
		"[notify]\nurls = [\"%zzK3YK3YK3Y\"]\n",
		"[blockers.prometheus]\nurl = \"ftp://alice:pr0mPassw0rd@h/\"\n",
	} {
		_, err := LoadFiles(writeTemp(t, []byte(body)))
		if err == nil {
			t.Errorf("%q loaded", body)
			continue
		}
		noSecret(t, "the error", err.Error())
		if !strings.Contains(err.Error(), "url") {
			t.Errorf("the error does not name the key: %v", err)
		}
	}
}

func TestPrometheusCredentialFiles(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass")
	if err := os.WriteFile(pass, []byte("pr0mPassw0rd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body string
		want []string // in the error; none: valid
	}{
		{"password file", fmt.Sprintf("url = \"https://prom:9090\"\nusername = \"kured\"\npassword_file = %q\n", pass), nil},
		{"missing file", "url = \"https://prom:9090\"\nbearer_token_file = \"/nonexistent/token\"\n",
			[]string{"blockers.prometheus.bearer_token_file: /nonexistent/token: file not found"}},
		{"a directory", fmt.Sprintf("url = \"https://prom:9090\"\nca_file = %q\n", dir),
			[]string{"blockers.prometheus.ca_file: " + dir + ": not a regular file"}},
		{"not checked without a URL", "bearer_token_file = \"/nonexistent/token\"\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadFiles(writeTemp(t, []byte("[blockers.prometheus]\n"+tt.body)))
			if (err == nil) != (tt.want == nil) {
				t.Fatalf("err = %v, want one with %q", err, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want %q in it", err, w)
				}
			}
		})
	}
}
