package config

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// Marshal writes c as TOML that Load reads back to the same configuration.
func Marshal(c Config) ([]byte, error) {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		return nil, fmt.Errorf("encode configuration: %w", err)
	}
	return b.Bytes(), nil
}

var (
	tableLine = regexp.MustCompile(`^\s*\[([^\[\]]+)\]\s*$`)
	arrayLine = regexp.MustCompile(`^\s*\[\[([^\[\]]+)\]\]\s*$`)
	valueLine = regexp.MustCompile(`^\s*("(?:[^"\\]|\\.)*"|[A-Za-z0-9_-]+)\s*=`)
)

// Render writes the effective configuration as TOML, with a comment after
// each value that a file set saying which file and line set it.
func (l *Loaded) Render(w io.Writer) error {
	data, err := Marshal(l.Config)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "# effective configuration from %s\n", strings.Join(l.Files, ", ")); err != nil {
		return err
	}
	var table string
	counts := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch m := arrayLine.FindStringSubmatch(line); {
		case m != nil:
			table = fmt.Sprintf("%s[%d]", m[1], counts[m[1]])
			counts[m[1]]++
		case tableLine.MatchString(line):
			table = strings.TrimSpace(tableLine.FindStringSubmatch(line)[1])
		default:
			if v := valueLine.FindStringSubmatch(line); v != nil {
				key := v[1]
				if table != "" {
					key = table + "." + key
				}
				if o, ok := l.Origins[key]; ok {
					line += "  # " + o.String()
				}
			}
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return sc.Err()
}
