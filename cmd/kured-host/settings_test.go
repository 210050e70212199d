package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/kured-host/kured-host/daemon/config"
)

// TestSettingsShownClusterPart: `kured-host settings` shows, of the
// effective configuration, exactly the keys the cluster may set, with
// their tables; never a host's credential key.
func TestSettingsShownClusterPart(t *testing.T) {
	l, err := config.CheckCluster("[lock]\nconcurrency = 2\n[[lock.groups]]\nlabel = \"topology.kubernetes.io/zone\"\nmax = 1\n" +
		"[blockers.prometheus]\nurl = \"https://prom.example/\"\nalert_firing_only = true\n")
	if err != nil {
		t.Fatal(err)
	}
	var rendered, out bytes.Buffer
	if err := l.Render(&rendered); err != nil {
		t.Fatal(err)
	}
	if err := writeClusterPart(&out, rendered.Bytes()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	for i, line := range lines {
		lines[i] = strings.TrimSpace(line)
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{"[lock]\nconcurrency = 2", "[[lock.groups]]\nlabel = \"topology.kubernetes.io/zone\"", "max = 1",
		"[window]\ndays = ", "time_zone = ", "[blockers]\npod_selectors", "inhibitors = true", "[blockers.prometheus]\nurl = \"https://prom.example/\"",
		"alert_firing_only = true", "timeout = "} {
		if !strings.Contains(got, want) {
			t.Errorf("the settings lack %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"username", "password_file", "bearer_token_file", "ca_file", "alarm_age", "ttl", "[drain]", "[sentinel]"} {
		if strings.Contains(got, not) {
			t.Errorf("the settings show %q, which the cluster may not set:\n%s", not, got)
		}
	}
}

// TestShownSettings: stored settings that are not valid are shown with
// credentials, URLs and terminal escapes hidden.
func TestShownSettings(t *testing.T) {
	stored := "[blockers.prometheus]\nurl = \"https://kured:hunter2@prom.example/?token=T0KEN\"\npassword = \"s3cr3tpw\"\n" +
		"bearer_token_file = \"/etc/tok\"\n\"auth.token\" = \"abcd1234\"\n# \x1b]0;owned\x07 \u202eevil\n[lock]\nconcurrency = 0\n"
	got := shownSettings(stored)
	for _, secret := range []string{"hunter2", "kured:", "T0KEN", "s3cr3tpw", "/etc/tok", "abcd1234", "\x1b", "\x07", "\u202e"} {
		if strings.Contains(got, secret) {
			t.Errorf("shown settings hold %q:\n%s", secret, got)
		}
	}
	for _, want := range []string{`url = "https://…@prom.example/…"`, `password = "…"`, `\x1b]0;owned\x07 \u202eevil`, "[lock]\nconcurrency = 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("shown settings lack %q:\n%s", want, got)
		}
	}
}

// TestReportPrintable: an error that quotes the cluster (an API server's
// message, the settings) reaches the terminal escaped, line by line.
func TestReportPrintable(t *testing.T) {
	var b bytes.Buffer
	if code := report(errors.New("paused by \x1b[2Jbob\nreason: \u202eevil"), &b); code != exitFailure {
		t.Errorf("exit %d, want %d", code, exitFailure)
	}
	if want := "kured-host: paused by \\x1b[2Jbob\nreason: \\u202eevil\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
