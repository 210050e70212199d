package fromkured

import (
	"errors"
	"strings"
)

// splitWords splits a command string into words as kured does before it
// runs --reboot-command or --reboot-sentinel-command (google/shlex, no
// shell): white space separates words; single quotes keep everything up
// to the next single quote; double quotes and a backslash outside quotes
// keep the next character whatever it is; a # that starts a word begins a
// comment to the end of the line. Nothing else is special: "$HOME", "|"
// and ";" are ordinary characters, since kured runs the words without a
// shell, as kured-host does.
func splitWords(s string) ([]string, error) {
	var sp splitter
	for _, r := range s {
		sp.read(r)
	}
	return sp.finish()
}

// splitState is what the next character of a command string means.
type splitState int

const (
	unquoted      splitState = iota
	escaped                  // after a backslash outside quotes
	singleQuoted             // up to the next single quote
	doubleQuoted             // up to the next double quote
	doubleEscaped            // after a backslash inside double quotes
	comment                  // after a # that starts a word, up to the end of the line
)

// splitter is splitWords' state machine: the words so far and the one being built.
type splitter struct {
	state  splitState
	words  []string
	word   strings.Builder
	inWord bool // a word has begun, even an empty one ('')
}

// read feeds one character to the machine.
func (sp *splitter) read(r rune) {
	switch sp.state {
	case unquoted:
		sp.readUnquoted(r)
	case escaped:
		sp.add(r)
		sp.state = unquoted
	case singleQuoted:
		if r == '\'' {
			sp.state = unquoted
		} else {
			sp.add(r)
		}
	case doubleQuoted:
		sp.readDoubleQuoted(r)
	case doubleEscaped:
		sp.add(r)
		sp.state = doubleQuoted
	case comment:
		if r == '\n' {
			sp.state = unquoted
		}
	}
}

// readUnquoted: white space ends a word; quotes begin one, even empty.
func (sp *splitter) readUnquoted(r rune) {
	switch {
	case r == ' ' || r == '\t' || r == '\n' || r == '\r':
		sp.end()
	case r == '#' && !sp.inWord:
		sp.state = comment
	case r == '\\':
		sp.state = escaped
	case r == '\'':
		sp.state, sp.inWord = singleQuoted, true
	case r == '"':
		sp.state, sp.inWord = doubleQuoted, true
	default:
		sp.add(r)
	}
}

// readDoubleQuoted: a backslash keeps the next character, whatever it is.
func (sp *splitter) readDoubleQuoted(r rune) {
	switch r {
	case '\\':
		sp.state = doubleEscaped
	case '"':
		sp.state = unquoted
	default:
		sp.add(r)
	}
}

// add puts r in the word, which begins if it had not.
func (sp *splitter) add(r rune) {
	sp.word.WriteRune(r)
	sp.inWord = true
}

// end closes the word, if one has begun: white space alone makes none.
func (sp *splitter) end() {
	if sp.inWord {
		sp.words = append(sp.words, sp.word.String())
		sp.word.Reset()
		sp.inWord = false
	}
}

// finish ends the last word; a string cut inside quotes or after a backslash is refused.
func (sp *splitter) finish() ([]string, error) {
	switch sp.state {
	case escaped:
		return nil, errors.New("it ends with a backslash")
	case singleQuoted:
		return nil, errors.New("a single quote is not closed")
	case doubleQuoted, doubleEscaped:
		return nil, errors.New("a double quote is not closed")
	}
	sp.end()
	return sp.words, nil
}
