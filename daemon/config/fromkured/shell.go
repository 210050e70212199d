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
	var (
		words  []string
		word   strings.Builder
		inWord bool
	)
	end := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			end()
		case r == '#' && !inWord:
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case r == '\\':
			if i+1 == len(rs) {
				return nil, errors.New("it ends with a backslash")
			}
			i++
			word.WriteRune(rs[i])
			inWord = true
		case r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, errors.New("a single quote is not closed")
			}
			word.WriteString(string(rs[i+1 : j]))
			i, inWord = j, true
		case r == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) {
					j++
				}
				word.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, errors.New("a double quote is not closed")
			}
			i, inWord = j, true
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	end()
	return words, nil
}
