package config

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"reflect"
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
// each value that a file set saying which file and line set it. URLs are
// written redacted (see URL), so a rendering with credentials in a URL
// does not load back to the same configuration; its first lines say so.
func (l *Loaded) Render(w io.Writer) error {
	c := l.Config
	hidden := hideURLs(reflect.ValueOf(&c).Elem(), "")
	data, err := Marshal(c)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# effective configuration from %s\n", strings.Join(l.Files, ", "))
	if len(hidden) > 0 {
		header += "# URLs are shown redacted (their credentials, paths and queries hidden): put the real\n" +
			"# values back before using this output as a configuration file\n"
	}
	if _, err := io.WriteString(w, header); err != nil {
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
				var notes []string
				if hidden[key] {
					notes = append(notes, "redacted")
				}
				if o, ok := l.Origins[key]; ok {
					notes = append(notes, o.String())
				}
				if len(notes) > 0 {
					line += "  # " + strings.Join(notes, "; ")
				}
			}
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// hideURLs makes every URL under v (a settable struct) marshal redacted,
// and returns the keys whose value that changes. Slices are copied first:
// the configuration they belong to is not this copy's alone.
func hideURLs(v reflect.Value, path string) map[string]bool {
	hidden := map[string]bool{}
	switch {
	case v.Type() == urlType:
		u := v.Interface().(URL)
		if u.Redacted() {
			hidden[path] = true
		}
		u.hide = true
		v.Set(reflect.ValueOf(u))
	case v.Kind() == reflect.Struct && !isText(v.Type()):
		for i := range v.NumField() {
			if tag := v.Type().Field(i).Tag.Get("toml"); tag != "" {
				maps.Copy(hidden, hideURLs(v.Field(i), joinKey(path, tag)))
			}
		}
	case v.Kind() == reflect.Slice && !v.IsNil():
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		v.Set(c)
		for i := range v.Len() {
			for k := range hideURLs(v.Index(i), fmt.Sprintf("%s[%d]", path, i)) {
				hidden[k] = true
				hidden[path] = true // the array's line
			}
		}
	}
	return hidden
}
