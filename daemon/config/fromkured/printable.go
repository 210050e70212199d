package fromkured

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kured-host/kured-host/daemon/printable"
)

// ErrUnprintable is input that holds a character that does not print: a
// control character (an escape sequence, a carriage return), a
// bidirectional override or isolate, another invisible character, or a
// byte that is not UTF-8. It would act on the operator's terminal, or
// hide or reorder what the drop-in says, and TOML refuses most of them:
// the conversion stops and names it (UnprintableError).
var ErrUnprintable = errors.New("a value holds a character that does not print")

// UnprintableError names the value, where it is, and the character.
type UnprintableError struct {
	Where string // "kured's argument 3", "variable KURED_PERIOD", "spec.template.spec.containers[0].name"
	Shown string // the value, escaped, secrets hidden
	Pos   int    // the character's place in the value, from 1
	Char  string // the character, escaped: `\x1b`
	What  string // "a control character"
}

func (e *UnprintableError) Error() string {
	return fmt.Sprintf("%s (%s): character %d is %s (%s); kured's values are converted only if every character prints: "+
		"remove it, or convert that value by hand", e.Where, e.Shown, e.Pos, e.What, e.Char)
}

// Is makes errors.Is(err, ErrUnprintable) true.
func (e *UnprintableError) Is(target error) bool { return target == ErrUnprintable }

// spacing is what a value that is a command (split into words as kured
// splits it) may hold besides printing characters: it separates words.
const spacing = "\t\n"

// checkText returns an UnprintableError for the first character of s
// that does not print and is not in allowed. shown is how the error
// shows s (the same text with secrets hidden); it is escaped here.
func checkText(where, s, shown, allowed string) error {
	pos := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		pos++
		invalid := r == utf8.RuneError && size == 1
		if invalid || !unicode.IsPrint(r) && !strings.ContainsRune(allowed, r) {
			return &UnprintableError{Where: where, Shown: printable.String(shown), Pos: pos,
				Char: printable.String(s[i : i+size]), What: describe(r, invalid)}
		}
		i += size
	}
	return nil
}

func describe(r rune, invalid bool) string {
	switch {
	case invalid:
		return "a byte that is not UTF-8"
	case r < 0x20 || r >= 0x7f && r < 0xa0:
		return "a control character"
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return "a bidirectional control"
	case unicode.Is(unicode.Cf, r):
		return "an invisible format character"
	case unicode.IsSpace(r):
		return "a space other than the ASCII space"
	}
	return "a character that does not print"
}
