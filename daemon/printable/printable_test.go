package printable

import "testing"

func TestString(t *testing.T) {
	tests := []struct{ name, in, want, lines string }{
		{"plain", "node-1 is waiting: 3 ahead", "node-1 is waiting: 3 ahead", ""},
		{"letters of other scripts", "Zone größe 東京 ✓", "Zone größe 東京 ✓", ""},
		{"a backslash stays", `alert=~"Kube.*\d"`, `alert=~"Kube.*\d"`, ""},
		{"terminal escape", "ok\x1b[2J\x1b]0;owned\x07", `ok\x1b[2J\x1b]0;owned\x07`, ""},
		{"carriage return hides what came before", "paused\rresumed", `paused\rresumed`, `paused\rresumed`},
		{"line feed", "a\nSTATUS=forged", `a\nSTATUS=forged`, "a\nSTATUS=forged"},
		{"tab and DEL", "a\tb\x7f", `a\tb\x7f`, ""},
		{"C1 control", "a\u009bb", `a\x9bb`, ""},
		{"bidi override", "evil\u202egnp.exe", `evil\u202egnp.exe`, ""},
		{"bidi isolate", "\u2066x\u2069", `\u2066x\u2069`, ""},
		{"zero width", "ad\u200bmin", `ad\u200bmin`, ""},
		{"line separator", "a\u2028b", `a\u2028b`, ""},
		{"not UTF-8", "a\xffb\xc3", `a\xffb\xc3`, ""},
		{"tag character", "x\U000e0041", `x\U000e0041`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			lines := tt.lines
			if lines == "" {
				lines = tt.want
			}
			if got := Lines(tt.in); got != lines {
				t.Errorf("Lines(%q) = %q, want %q", tt.in, got, lines)
			}
		})
	}
}

// FuzzString: whatever comes in, what goes out holds nothing a terminal
// acts on, and text that needed nothing is returned as it was.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[31m", "\u202e", "a\xffb", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, got := range []string{String(s), Lines(s)} {
			for _, r := range got {
				if !shows(r) && r != '\n' {
					t.Fatalf("%q escaped to %q, which still holds %U", s, got, r)
				}
			}
		}
		if got := String(s); clean(s, false) && got != s {
			t.Fatalf("clean %q changed to %q", s, got)
		}
	})
}
