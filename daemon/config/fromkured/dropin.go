package fromkured

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/printable"
)

// conv collects the drop-in's entries, one per flag given.
type conv struct {
	src      Source
	cl       *cmdline
	defaults map[string]any // kured-host's defaults, as the TOML decoder reads them
	entries  []*entry
	warnings []string
	text     string // the drop-in, once settled
}

// entry is what one flag became: comment lines naming the flag, then the
// keys it sets (none for a comment only).
type entry struct {
	order int    // the flag's place in config.KuredOptions; others after
	table string // "" for the block of flags with no key here
	shown string // the flag as given ("--period=2h, KURED_PERIOD=3h")
	notes []string
	kvs   []kv
	// atomic: its keys stand or fall together (reboot.method = "command"
	// without its command would reboot another way).
	atomic bool
}

// kv is one key of an entry.
type kv struct {
	full string // the key as the loader names it: `node.pre_reboot_labels."example.com/a"`
	line string // as written: `"example.com/a" = "true"`
}

func newConv(src Source) (*conv, error) {
	data, err := config.Marshal(config.Default())
	if err != nil {
		return nil, err
	}
	c := &conv{src: src, cl: newCmdline()}
	if _, err := toml.Decode(string(data), &c.defaults); err != nil {
		return nil, fmt.Errorf("read the defaults: %w", err)
	}
	return c, nil
}

// warn adds a warning for the operator's terminal, escaped: input is
// checked (checkText), and this is the second line of defence.
func (c *conv) warn(format string, args ...any) {
	c.warnings = append(c.warnings, printable.String(fmt.Sprintf(format, args...)))
}

func (c *conv) add(e *entry) { c.entries = append(c.entries, e) }

// value is the flag's value as kured has it (its default when not given).
func (c *conv) value(flag string) *value { return c.cl.values[flag] }

// newEntry is the entry of the flags vs (their uses named together), in
// table, with how they were read first among the notes.
func (c *conv) newEntry(table string, vs ...*value) *entry {
	e := &entry{order: len(config.KuredOptions), table: table}
	var shown []string
	for _, v := range vs {
		e.order = min(e.order, optionIndex(v.flag))
		shown = append(shown, v.shown...)
		e.notes = append(e.notes, v.notes...)
	}
	e.shown = strings.Join(shown, ", ")
	c.add(e)
	return e
}

// comment writes v as a comment only, in table.
func (c *conv) comment(v *value, table string, notes ...string) {
	e := c.newEntry(table, v)
	e.notes = append(e.notes, notes...)
}

// refuse writes v as a comment saying why it is not converted, and warns.
func (c *conv) refuse(v *value, table, why string) {
	c.comment(v, table, "not converted: "+why)
	c.warn("%s: not converted: %s", strings.Join(v.shown, ", "), why)
}

// set writes v's key (config.KuredOptions) with val.
func (c *conv) set(v *value, val any, notes ...string) {
	c.setKey(v, optionKey(v.flag), val, notes...)
}

// setKey writes key = val for v; a value that kured-host's default
// already has is a comment only, so that the drop-in sets no more than
// it must and leaves the cluster's settings and config.toml in force.
func (c *conv) setKey(v *value, key string, val any, notes ...string) {
	text, err := tomlValue(val)
	table, name := splitKey(key)
	e := c.newEntry(table, v)
	e.notes = append(e.notes, notes...)
	switch def, ok := c.defaultText(key); {
	case err != nil:
		e.notes = append(e.notes, "not converted: "+err.Error())
		c.warn("%s: not converted: %v", e.shown, err)
	case ok && def == text && c.atKuredDefault(v):
		e.notes = append(e.notes, fmt.Sprintf("kured's default; kured-host's default is the same (%s = %s)", name, def))
	case ok && def == text:
		e.notes = append(e.notes, fmt.Sprintf("the same as kured-host's default (%s = %s)", name, def))
	default:
		e.kvs = append(e.kvs, kv{full: key, line: name + " = " + text})
	}
}

// setKeys writes several keys of one table for v, each kept or left out
// alone unless atomic. Values that are kured-host's defaults are written
// all the same: together they say one thing.
func (c *conv) setKeys(v *value, table string, atomic bool, keys []string, vals []any, notes ...string) {
	e := c.newEntry(table, v)
	e.notes = append(e.notes, notes...)
	e.atomic = atomic
	for i, k := range keys {
		text, err := tomlValue(vals[i])
		if err != nil {
			e.notes = append(e.notes, fmt.Sprintf("left out %s: %v", k, err))
			continue
		}
		e.kvs = append(e.kvs, kv{full: joinKey(table, k), line: quoteKey(k) + " = " + text})
	}
}

// atKuredDefault reports whether v has kured's default value.
func (c *conv) atKuredDefault(v *value) bool {
	if !v.given {
		return true
	}
	d := v.def
	probe := &value{flag: v.flag}
	c.cl.set(probe, d, d.def, "", false)
	if d.kind == kSlice || d.kind == kArray {
		return slices.Equal(probe.list, v.list)
	}
	if d.kind == kDuration {
		return durationsEqual(probe.text, v.text)
	}
	return probe.text == v.text
}

// defaultText is kured-host's default for key, as TOML.
func (c *conv) defaultText(key string) (string, bool) {
	var cur any = c.defaults
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[part]; !ok {
			return "", false
		}
	}
	text, err := tomlValue(cur)
	return text, err == nil
}

// tomlValue writes val as a TOML value, through the same encoder and
// text marshalers as config.Marshal.
func tomlValue(val any) (string, error) {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(map[string]any{"v": val}); err != nil {
		return "", fmt.Errorf("encode: %w", err)
	}
	text, ok := strings.CutPrefix(strings.TrimSpace(b.String()), "v = ")
	if !ok {
		// The encoder leaves out a nil slice, and writes a table on
		// lines of its own: neither is a value for one line.
		return "", fmt.Errorf("no one-line TOML value for %T", val)
	}
	return text, nil
}

func splitKey(key string) (table, name string) {
	i := strings.LastIndex(key, ".")
	return key[:i], key[i+1:]
}

func tableOf(key string) string {
	if key == "" {
		return ""
	}
	t, _ := splitKey(key)
	return t
}

func bareKey(k string) bool {
	return k != "" && !strings.ContainsFunc(k, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
}

// quoteKey writes k as a TOML key.
func quoteKey(k string) string {
	if bareKey(k) {
		return k
	}
	q, err := tomlValue(k)
	if err != nil {
		return fmt.Sprintf("%q", k)
	}
	return q
}

// joinKey names a key as the loader's problems do.
func joinKey(table, k string) string {
	if !bareKey(k) {
		k = fmt.Sprintf("%q", k)
	}
	return table + "." + k
}

// tables is the order of the drop-in's tables: config.toml's.
var tables = []string{
	"", "kubernetes", "sentinel", "window", "lock", "blockers", "blockers.prometheus", "drain",
	"reboot", "node", "node.pre_reboot_labels", "node.post_reboot_labels", "notify", "metrics", "log",
}

// clusterKey: set in a host's file, it overrides the cluster's settings.
func clusterKey(full string) bool { return config.IsClusterKey(full) }

// secretKey: its value may carry credentials.
func secretKey(full string) bool { return full == "notify.urls" || full == "blockers.prometheus.url" }

// sets reports whether the drop-in sets a key that pred is true of.
func (c *conv) sets(pred func(full string) bool) bool {
	for _, e := range c.entries {
		for _, k := range e.kvs {
			if pred(k.full) {
				return true
			}
		}
	}
	return false
}

// render writes the drop-in.
func (c *conv) render() string {
	var b strings.Builder
	writeComment(&b, "", c.header()...)
	byTable := map[string][]*entry{}
	for _, e := range c.entries {
		byTable[e.table] = append(byTable[e.table], e)
	}
	for _, t := range tables {
		es := byTable[t]
		if len(es) == 0 {
			continue
		}
		slices.SortStableFunc(es, func(a, b *entry) int { return a.order - b.order })
		b.WriteString("\n")
		if t == "" {
			b.WriteString("# Not carried over:\n")
		} else {
			fmt.Fprintf(&b, "[%s]\n", t)
		}
		for _, e := range es {
			writeComment(&b, e.shown, e.notes...)
			for _, k := range e.kvs {
				b.WriteString(k.line + "\n")
			}
		}
	}
	return b.String()
}

func (c *conv) header() []string {
	h := []string{
		fmt.Sprintf("kured-host drop-in converted from kured's arguments (%s) by `kured-host config from-kured`.", c.src.Name),
		"Install it in /etc/kured-host/config.d/ (for example as 40-from-kured.toml), then run `kured-host check --config-only`.",
		"A comment names each kured flag above the keys it became. A value that kured-host's default already has is a comment only: its key is not set here.",
	}
	if c.sets(clusterKey) {
		h = append(h, "lock.concurrency, [window] and the blockers but for credentials and files may be set once for the whole cluster instead (`kured-host settings apply -f FILE`; docs/configuration.md lists the keys); a key a host's file sets wins over the cluster's settings.")
	}
	if c.sets(secretKey) {
		h = append(h, "It holds notify or Prometheus URLs, which may carry credentials: keep it root-owned with mode 0600 (docs/configuration.md, Secrets).")
	}
	return h
}

// writeComment writes "# shown: note; note." wrapped, continuation lines
// indented; without shown, each note is a paragraph.
func writeComment(b *strings.Builder, shown string, notes ...string) {
	var paras []string
	switch {
	case shown == "":
		paras = notes
	case len(notes) == 0:
		paras = []string{shown}
	default:
		trimmed := make([]string, len(notes))
		for i, n := range notes {
			trimmed[i] = strings.TrimSuffix(n, ".")
		}
		text := shown + ": " + strings.Join(trimmed, "; ")
		if !strings.HasSuffix(text, ".") {
			text += "."
		}
		paras = []string{text}
	}
	for _, p := range paras {
		// A character TOML refuses in a comment would make the drop-in
		// fail to load; input is checked before (checkText), and this
		// keeps every comment loadable all the same.
		p = printable.String(p)
		for i, line := range wrap(p, 76) {
			if i == 0 || shown == "" {
				b.WriteString("# " + line + "\n")
			} else {
				b.WriteString("#   " + line + "\n")
			}
		}
	}
}

// wrap breaks text at spaces into lines of about width characters.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// settle checks the drop-in with the loader's rules and leaves out each
// key the loader rejects, with its reason, until the drop-in loads.
func (c *conv) settle() error {
	for {
		text := c.render()
		_, err := config.CheckDropIn("drop-in", text)
		if err == nil {
			c.text = text
			return nil
		}
		var cerr *config.Error
		if !errors.As(err, &cerr) {
			return err
		}
		dropped := false
		for _, p := range cerr.Problems {
			dropped = c.leaveOut(p) || dropped
		}
		if !dropped {
			// A problem that is no key's (a syntax error): the drop-in
			// as written does not parse. Input cannot cause it (values
			// are checked, comments escaped, values encoded): it is a
			// bug of this package.
			return fmt.Errorf("the converted drop-in does not load (a bug in kured-host: please report it, with kured's arguments): %s", printable.String(err.Error()))
		}
	}
}

// leaveOut removes the key that problem p is about.
func (c *conv) leaveOut(p config.Problem) bool {
	for _, e := range c.entries {
		i := slices.IndexFunc(e.kvs, func(k kv) bool {
			return p.Key == k.full || strings.HasPrefix(p.Key, k.full+"[") || strings.HasPrefix(p.Key, k.full+".")
		})
		if i < 0 {
			continue
		}
		what := "not converted"
		if e.atomic || len(e.kvs) == 1 {
			e.kvs = nil
		} else {
			e.kvs = slices.Delete(e.kvs, i, i+1)
			what = "left out"
		}
		why := fmt.Sprintf("%s %s: %s", what, p.Key, p.Message)
		e.notes = append(e.notes, why)
		c.warn("%s: %s", e.shown, why)
		return true
	}
	return false
}
