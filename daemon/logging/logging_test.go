package logging

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestJournalPriorities(t *testing.T) {
	var b bytes.Buffer
	log, err := New(&b, Options{Format: "text", Level: "debug", Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	log = log.With("component", "test")
	log.Debug("d")
	log.Info("i", "k", "v")
	log.Warn("w")
	log.Error("e")
	want := []string{
		`<7>level=DEBUG msg=d component=test`,
		`<6>level=INFO msg=i component=test k=v`,
		`<4>level=WARN msg=w component=test`,
		`<3>level=ERROR msg=e component=test`,
	}
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", b.String(), strings.Join(want, "\n"))
	}
}

func TestLevelAndFormat(t *testing.T) {
	tests := []struct {
		opts    Options
		wantErr bool
		want    string // substring of the output of Info("hello")
	}{
		{Options{Format: "text", Level: "info"}, false, "level=INFO msg=hello"},
		{Options{Format: "json", Level: "info"}, false, `"msg":"hello"`},
		{Options{Format: "text", Level: "warn"}, false, ""},
		{Options{Format: "xml", Level: "info"}, true, ""},
		{Options{Format: "text", Level: "loud"}, true, ""},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		log, err := New(&b, tt.opts)
		if (err != nil) != tt.wantErr {
			t.Errorf("%+v: err = %v", tt.opts, err)
			continue
		}
		if err != nil {
			continue
		}
		log.Info("hello")
		if tt.want == "" && b.Len() > 0 || !strings.Contains(b.String(), tt.want) {
			t.Errorf("%+v: output %q, want %q", tt.opts, b.String(), tt.want)
		}
		if strings.HasPrefix(b.String(), "<") {
			t.Errorf("%+v: priority prefix outside the journal: %q", tt.opts, b.String())
		}
	}
	if Priority(slog.LevelWarn+1) != "<4>" {
		t.Error("levels between warn and error are warnings")
	}
}

// TestPrintable: text from outside in a message or a value reaches the
// log escaped, in both formats, so that journalctl on a terminal shows it
// rather than acting on it.
func TestPrintable(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var b bytes.Buffer
		log, err := New(&b, Options{Format: format, Level: "info"})
		if err != nil {
			t.Fatal(err)
		}
		log.Info("paused: \x1b[2Jall clear\u202e", "reason", "x\ry", "err", errors.New("bad \u2066label"))
		out := b.String()
		for _, bad := range []string{"\x1b", "\r", "\u202e", "\u2066"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s: %q reached the log: %s", format, bad, out)
			}
		}
		if !strings.Contains(out, `\x1b[2Jall clear`) || !strings.Contains(out, `\u2066label`) {
			t.Errorf("%s: the escaped text is not shown: %s", format, out)
		}
	}
}
