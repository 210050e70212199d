// Package printable makes text from outside (ConfigMap data, other nodes'
// claims, alert names, logind inhibitors, Node labels) safe to show: on a
// terminal, in a Kubernetes Event, in a log line's message, in systemd's
// STATUS=. What a terminal would act on rather than show (escape
// sequences, carriage returns, backspaces), what would reorder the text
// around it (bidirectional overrides and isolates) and what is invisible
// (zero-width and other format characters, bytes that are not UTF-8) is
// written as a Go escape instead, so that it is seen and changes nothing.
package printable

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every rune that is not printable written as an
// escape: \n, \t, \x1b, \u202e, and \xff for a byte that is not UTF-8.
// A space is printable; a backslash is left as it is (text that holds
// one, such as a regular expression, stays readable, and nothing acts
// on it).
func String(s string) string { return escape(s, false) }

// Lines is String for text of several lines: a line feed is kept, so
// that the text keeps its lines; a carriage return is escaped.
func Lines(s string) string { return escape(s, true) }

func escape(s string, keepNewline bool) string {
	if clean(s, keepNewline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewline, shows(r):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// shows reports whether r is shown as itself: letters, marks, numbers,
// punctuation, symbols and the ASCII space (unicode.IsPrint). Control and
// format characters (bidirectional controls among them), other spaces and
// line or paragraph separators are not.
func shows(r rune) bool { return unicode.IsPrint(r) }

// clean reports whether s needs no escape: the common case, checked
// without building anything.
func clean(s string, keepNewline bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return cleanSlow(s[i:], keepNewline)
		}
		if (c < 0x20 && !(keepNewline && c == '\n')) || c == 0x7f {
			return false
		}
	}
	return true
}

func cleanSlow(s string, keepNewline bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || !(shows(r) || keepNewline && r == '\n') {
			return false
		}
		i += size
	}
	return true
}
