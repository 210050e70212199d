package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/kured-host/kured-host/daemon/redact"
)

// Each value type below reads itself from a TOML string and writes itself
// back in the same form, so that Marshal writes a file that loads again
// (URL shows itself redacted everywhere else). want() is what the loader
// says a value of that type should look like when it finds something else.

// Duration is a time.Duration written as a Go duration string ("90s", "10m").
// A bare integer is rejected rather than read as nanoseconds, which is what
// `timeout = 10` would otherwise silently mean.
type Duration time.Duration

// Std returns the value as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (Duration) want() string { return `a duration string such as "90s", "10m" or "1h"` }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: use a number with a unit, such as \"90s\", \"10m\" or \"1h\"", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler, without the zero units
// that time.Duration.String adds ("1h", not "1h0m0s").
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// TimeOfDay is a wall-clock time written "HH:MM" or "HH:MM:SS", counted in
// seconds since midnight. "24:00" is allowed as the end of a day.
type TimeOfDay int

// EndOfDay is "24:00".
const EndOfDay TimeOfDay = 24 * 60 * 60

func (TimeOfDay) want() string { return `a time of day such as "22:00" or "05:30:00"` }

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *TimeOfDay) UnmarshalText(b []byte) error {
	s := string(b)
	bad := fmt.Errorf("invalid time of day %q: use \"HH:MM\" or \"HH:MM:SS\" from \"00:00\" to \"24:00\"", s)
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad
	}
	limits := []int{24, 59, 59}
	var n [3]int
	for i, p := range parts {
		if len(p) < 1 || len(p) > 2 {
			return bad
		}
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > limits[i] {
			return bad
		}
		n[i] = v
	}
	v := TimeOfDay(n[0]*3600 + n[1]*60 + n[2])
	if v > EndOfDay {
		return bad
	}
	*t = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (t TimeOfDay) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

func (t TimeOfDay) String() string {
	h, m, s := int(t)/3600, int(t)/60%60, int(t)%60
	if s != 0 {
		return fmt.Sprintf("%02d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%02d:%02d", h, m)
}

// Weekday is a day of the week. It reads kured's two-letter forms ("mo"),
// three-letter forms ("mon") and full names ("monday"), in any case.
type Weekday time.Weekday

func (Weekday) want() string { return `a day such as "mon" or "monday"` }

// UnmarshalText implements encoding.TextUnmarshaler.
func (w *Weekday) UnmarshalText(b []byte) error {
	s := strings.ToLower(string(b))
	for d := time.Sunday; d <= time.Saturday; d++ {
		full := strings.ToLower(d.String())
		if s == full || s == full[:3] || s == full[:2] {
			*w = Weekday(d)
			return nil
		}
	}
	return fmt.Errorf("invalid day %q: use \"mon\", \"tue\", \"wed\", \"thu\", \"fri\", \"sat\" or \"sun\"", b)
}

// MarshalText implements encoding.TextMarshaler.
func (w Weekday) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

func (w Weekday) String() string { return strings.ToLower(time.Weekday(w).String()[:3]) }

// Location is a time zone name loaded with time.LoadLocation ("UTC",
// "Local", "Europe/Berlin").
type Location struct {
	name string
	loc  *time.Location
}

// MustLocation returns the named zone and panics if it does not exist; for
// defaults and tests only.
func MustLocation(name string) Location {
	var l Location
	if err := l.UnmarshalText([]byte(name)); err != nil {
		panic(err)
	}
	return l
}

func (Location) want() string { return `a time zone name such as "UTC" or "Europe/Berlin"` }

// UnmarshalText implements encoding.TextUnmarshaler.
func (l *Location) UnmarshalText(b []byte) error {
	loc, err := time.LoadLocation(string(b))
	if err != nil || len(b) == 0 {
		return fmt.Errorf("unknown time zone %q: use an IANA name such as \"UTC\" or \"Europe/Berlin\", or \"Local\"", b)
	}
	*l = Location{name: string(b), loc: loc}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (l Location) MarshalText() ([]byte, error) { return []byte(l.name), nil }

// Location returns the loaded zone (UTC when unset).
func (l Location) Location() *time.Location {
	if l.loc == nil {
		return time.UTC
	}
	return l.loc
}

func (l Location) String() string { return l.name }

// Equal reports whether both name the same zone.
func (l Location) Equal(o Location) bool { return l.name == o.name }

// Selector is a Kubernetes label selector ("app=db,tier!=cache").
type Selector struct {
	text string
	sel  labels.Selector
}

// MustSelector parses s and panics if it is invalid; for defaults and tests.
func MustSelector(s string) Selector {
	var v Selector
	if err := v.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return v
}

func (Selector) want() string { return `a label selector string such as "app=db,tier!=cache"` }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Selector) UnmarshalText(b []byte) error {
	sel, err := labels.Parse(string(b))
	if err != nil {
		return fmt.Errorf("invalid label selector %q: %w", b, err)
	}
	*s = Selector{text: string(b), sel: sel}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (s Selector) MarshalText() ([]byte, error) { return []byte(s.text), nil }

// Selector returns the parsed selector; an unset one matches everything.
func (s Selector) Selector() labels.Selector {
	if s.sel == nil {
		return labels.Everything()
	}
	return s.sel
}

func (s Selector) String() string { return s.text }

// Equal reports whether both were written the same way.
func (s Selector) Equal(o Selector) bool { return s.text == o.text }

// Regexp is a regular expression in Go (RE2) syntax.
type Regexp struct {
	re *regexp.Regexp
}

func (Regexp) want() string { return `a regular expression string` }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Regexp) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = Regexp{}
		return nil
	}
	re, err := regexp.Compile(string(b))
	if err != nil {
		return fmt.Errorf("invalid regular expression %q: %w", b, err)
	}
	*r = Regexp{re: re}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (r Regexp) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Regexp returns the compiled expression, or nil when unset.
func (r Regexp) Regexp() *regexp.Regexp { return r.re }

func (r Regexp) String() string {
	if r.re == nil {
		return ""
	}
	return r.re.String()
}

// Equal reports whether both have the same source.
func (r Regexp) Equal(o Regexp) bool { return r.String() == o.String() }

// URL is an absolute URL with a scheme ("https://prometheus:9090",
// "slack://token@channel"). Such URLs often carry credentials, so a URL
// shows itself redacted everywhere (String, MarshalText: fmt, slog, JSON)
// except in the TOML that Marshal writes, which must load back to the same
// configuration; see daemon/redact for what is hidden.
type URL struct {
	u *url.URL
	// hide makes MarshalTOML write the redacted form (Render).
	hide bool
}

func (URL) want() string { return `a URL string such as "https://example.com/"` }

// quoted matches the quoted parts of url.Parse's errors: they repeat parts
// of the URL, which may be a password ("https://user:pa/ss@host" fails
// with invalid port ":pa").
var quoted = regexp.MustCompile(`"[^"]*"`)

// UnmarshalText implements encoding.TextUnmarshaler. Its errors never
// repeat the value.
func (u *URL) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*u = URL{}
		return nil
	}
	v, err := url.Parse(string(b))
	if err != nil {
		var uerr *url.Error
		why := "it cannot be parsed"
		if errors.As(err, &uerr) {
			why = quoted.ReplaceAllString(uerr.Err.Error(), `"…"`)
		}
		return fmt.Errorf("invalid URL (not shown, as it may hold credentials): %s; "+
			"in a user name or password, write / as %%2F, @ as %%40 and : as %%3A", why)
	}
	if v.Scheme == "" {
		return errors.New(`invalid URL (not shown, as it may hold credentials): it has no scheme (such as "https://")`)
	}
	*u = URL{u: v}
	return nil
}

// MarshalText implements encoding.TextMarshaler with the redacted form, so
// that a URL in a log line or JSON shows no secret.
func (u URL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// MarshalTOML implements toml.Marshaler, which the TOML encoder prefers to
// MarshalText: Marshal writes the whole URL, Render the redacted one.
func (u URL) MarshalTOML() ([]byte, error) {
	if u.hide {
		return []byte(tomlQuote(u.String())), nil
	}
	return []byte(tomlQuote(u.full())), nil
}

// URL returns the parsed URL, or nil when unset. It holds the credentials:
// show it only through redact.URL.
func (u URL) URL() *url.URL { return u.u }

// String is the URL without its secrets (redact.URL).
func (u URL) String() string { return redact.URL(u.u) }

// Redacted reports whether String hides anything.
func (u URL) Redacted() bool { return u.String() != u.full() }

func (u URL) full() string {
	if u.u == nil {
		return ""
	}
	return u.u.String()
}

// Equal reports whether both are the same URL.
func (u URL) Equal(o URL) bool { return u.full() == o.full() }

// tomlQuote writes s as a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// MessageData is what a notification template can use.
type MessageData struct {
	Node   string // the node's name
	Reason string // why (failure messages); empty otherwise
}

// Template is a notification message in text/template syntax, for example
// "Rebooting node {{.Node}}". It is parsed and tried on sample data when
// the configuration loads, so a misspelt field is a configuration error
// rather than a failed notification at 3 a.m.
type Template struct {
	text string
	tmpl *template.Template
}

// MustTemplate parses s and panics if it is invalid; for defaults and tests.
func MustTemplate(s string) Template {
	var t Template
	if err := t.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return t
}

func (Template) want() string { return `a message template string such as "Rebooting node {{.Node}}"` }

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *Template) UnmarshalText(b []byte) error {
	tmpl, err := template.New("message").Option("missingkey=error").Parse(string(b))
	if err != nil {
		return fmt.Errorf("invalid template %q: %w", b, err)
	}
	if textHas(tmpl.Tree.Root, "%s") {
		// kured's templates are printf formats; sent as they are, "%s"
		// would reach the chat literally.
		return fmt.Errorf("%q has kured's %%s, which is not replaced here: write the Go template %q", b,
			strings.ReplaceAll(string(b), "%s", "{{.Node}}"))
	}
	if err := tmpl.Execute(discard{}, MessageData{Node: "node", Reason: "reason"}); err != nil {
		return fmt.Errorf("invalid template %q: %w (fields: {{.Node}}, {{.Reason}})", b, err)
	}
	*t = Template{text: string(b), tmpl: tmpl}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (t Template) MarshalText() ([]byte, error) { return []byte(t.text), nil }

// Render fills in the template.
func (t Template) Render(d MessageData) (string, error) {
	if t.tmpl == nil {
		return "", nil
	}
	var b strings.Builder
	if err := t.tmpl.Execute(&b, d); err != nil {
		return "", fmt.Errorf("render message template: %w", err)
	}
	return b.String(), nil
}

func (t Template) String() string { return t.text }

// Equal reports whether both have the same source.
func (t Template) Equal(o Template) bool { return t.text == o.text }

// textHas reports whether the literal text of the template (not its
// actions: {{printf "%s" .Node}} is fine) holds sub.
func textHas(n parse.Node, sub string) bool {
	switch n := n.(type) {
	case *parse.TextNode:
		return strings.Contains(string(n.Text), sub)
	case *parse.ListNode:
		if n == nil {
			return false
		}
		return slices.ContainsFunc(n.Nodes, func(c parse.Node) bool { return textHas(c, sub) })
	case *parse.IfNode:
		return textHas(n.List, sub) || textHas(n.ElseList, sub)
	case *parse.RangeNode:
		return textHas(n.List, sub) || textHas(n.ElseList, sub)
	case *parse.WithNode:
		return textHas(n.List, sub) || textHas(n.ElseList, sub)
	}
	return false
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
