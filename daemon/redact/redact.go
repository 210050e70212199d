// Package redact hides the secrets of configured URLs (the Prometheus URL,
// notification URLs) in everything kured-host shows: log lines, errors,
// Events, sd_notify STATUS=, messages and `kured-host check`. A URL is
// shown as its scheme and, when that names a server, its host; userinfo,
// path, query and fragment become "…". Some notification services keep
// their token in the host part (ifttt://KEY, slack://token@channel,
// telegram://token@telegram): for those, and for any scheme not known to
// name a server there, the host is hidden too.
package redact

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mark stands in for every hidden part.
const Mark = "…"

// serverHosts are the schemes whose host part names a server, which is
// worth showing and is not a secret. Every other scheme has its host
// hidden: in shoutrrr's URLs for discord (webhook ID), ifttt (key), join,
// notifiarr (API key), pushbullet (token), pushover (user key), slack
// (token, channel or "webhook"), teams (tenant), telegram, wecom (key), the
// host is a token or an identifier, never a server.
var serverHosts = []string{
	"http", "https",
	// shoutrrr services with a server of their own in the host part.
	"bark", "generic", "googlechat", "gotify", "hangouts", "lark", "matrix",
	"mattermost", "ntfy", "opsgenie", "pagerduty", "rocketchat", "signal",
	"smtp", "zulip",
}

// ShowsHost reports whether the host of a URL with this scheme is shown.
// "generic+https" is shoutrrr's generic service: its base scheme counts.
func ShowsHost(scheme string) bool {
	base, _, _ := strings.Cut(strings.ToLower(scheme), "+")
	return slices.Contains(serverHosts, base)
}

// URL returns u as it may be shown: "https://prom:9090", with "…" for each
// part left out ("https://…@prom:9090/…", "ifttt://…"). A path of "/"
// alone is kept: it hides nothing.
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteByte(':')
	if u.Opaque != "" {
		b.WriteString(Mark) // "slack:token": all of it is the token
		return b.String()
	}
	b.WriteString("//")
	if !ShowsHost(u.Scheme) {
		if u.User != nil || u.Host != "" || hasRest(u) {
			b.WriteString(Mark)
		}
		return b.String()
	}
	if u.User != nil {
		b.WriteString(Mark + "@")
	}
	b.WriteString(u.Host)
	switch {
	case hasRest(u):
		b.WriteString("/" + Mark)
	case u.Path == "/":
		b.WriteByte('/')
	}
	return b.String()
}

// hasRest reports whether u has a path (other than "/"), a query or a
// fragment.
func hasRest(u *url.URL) bool {
	return (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != ""
}

// String is URL for a URL in text form. Text that does not parse as a URL
// is hidden whole, but for its scheme.
func String(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		if scheme, _, ok := strings.Cut(raw, "://"); ok && schemeRE.MatchString(scheme) {
			return scheme + "://" + Mark
		}
		return Mark
	}
	return URL(u)
}

var (
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	// urlRE finds URLs in free text: a scheme, "://" and everything up to
	// a space or a quote.
	urlRE = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>` + "`" + `]*`)
)

// minSecret is the shortest part of a URL that Text replaces where it
// stands alone: shorter ones would tear up ordinary words, and hide
// nothing worth hiding.
const minSecret = 4

// Text hides secrets in s: every URL in it is shown as URL shows it, and
// every part of the given URLs that may be secret (user name, password,
// a hidden host, each path segment, query and fragment values), wherever
// it appears on its own, such as a token quoted in an error.
func Text(s string, us ...*url.URL) string {
	s = urlRE.ReplaceAllStringFunc(s, func(m string) string {
		trimmed := strings.TrimRight(m, ".,:;)]}")
		return String(trimmed) + m[len(trimmed):]
	})
	var parts []string
	for _, u := range us {
		parts = append(parts, secrets(u)...)
	}
	// Longest first, so that a part inside another does not leave the
	// rest of the longer one behind.
	slices.SortFunc(parts, func(a, b string) int { return len(b) - len(a) })
	for _, p := range slices.Compact(parts) {
		s = strings.ReplaceAll(s, p, Mark)
	}
	return s
}

// secrets lists the parts of u that may be secret, in each form they may
// take in text (as written, and unescaped).
func secrets(u *url.URL) []string {
	if u == nil {
		return nil
	}
	var out []string
	add := func(v string) {
		if len(v) >= minSecret && v != Mark {
			out = append(out, v)
		}
	}
	// addSplit adds v and each piece of it: a token "id:secret" may show
	// up as "id" and "secret", a list "a,b" as "a".
	addSplit := func(vs ...string) {
		for _, v := range vs {
			add(v)
			for _, f := range strings.FieldsFunc(v, func(r rune) bool {
				return r == ',' || r == ' ' || r == ':' || r == '/'
			}) {
				add(f)
			}
		}
	}
	if u.User != nil {
		addSplit(u.User.Username(), u.User.String())
		if p, ok := u.User.Password(); ok {
			addSplit(p)
		}
	}
	// A hidden host that only repeats the service's name
	// (telegram://token@telegram) is a placeholder, not a secret.
	if base, _, _ := strings.Cut(u.Scheme, "+"); !ShowsHost(u.Scheme) && u.Hostname() != base {
		addSplit(u.Hostname(), u.Host)
	}
	addSplit(u.Opaque, u.Path, u.RawPath, u.EscapedPath(), u.Fragment, u.RawFragment)
	add(u.RawQuery)
	for _, vs := range u.Query() {
		addSplit(vs...)
		for _, v := range vs {
			add(url.QueryEscape(v))
			add(url.PathEscape(v))
		}
	}
	return out
}

// Error returns err with its text passed through Text, or nil for nil. It
// still matches what err matched with errors.Is (context.DeadlineExceeded
// and the like), but errors.As and Unwrap do not reach the original, whose
// text may hold the secrets: net/http's *url.Error carries the request's
// URL with its query, and shoutrrr quotes URLs and tokens in its errors.
func Error(err error, us ...*url.URL) error {
	if err == nil {
		return nil
	}
	return &redacted{msg: Text(err.Error(), us...), err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }

// Is lets errors.Is see the original chain without exposing it.
func (e *redacted) Is(target error) bool { return errors.Is(e.err, target) }
