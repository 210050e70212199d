package config

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kured-host/kured-host/daemon/claim"
)

// ClaimPrefix is the label and annotation prefix kured-host keeps for its
// own claim; node marks may not use it.
const ClaimPrefix = "kured-host.dev/"

// Validate checks the values that a single field cannot check alone: ranges,
// enumerations and combinations. It returns an *Error listing every problem.
func (c *Config) Validate() error {
	ps := &problems{}
	c.validate(func(key, format string, args ...any) {
		ps.add(Origin{}, key, format, args...)
	})
	return ps.err()
}

type reportFunc func(key, format string, args ...any)

func (c *Config) validate(report reportFunc) {
	if c.Version != Version {
		report("version", "unsupported version %d: this kured-host reads version %d", c.Version, Version)
	}
	c.Kubernetes.validate(report)
	c.Sentinel.validate(report)
	c.Window.validate(report)
	c.Lock.validate(report)
	c.Blockers.validate(report)
	c.Drain.validate(report)
	c.Reboot.validate(report)
	positive(report, "health.timeout", c.Health.Timeout)
	argv(report, "health.command", c.Health.Command, false)
	c.Node.validate(report)
	for i, u := range c.Notify.URLs {
		key := fmt.Sprintf("notify.urls[%d]", i)
		if u.URL() == nil {
			report(key, "must not be empty")
		} else if err := checkNotifyURL(u.URL()); err != nil {
			report(key, "%s: %v", u, err)
		}
	}
	if a := c.Metrics.Address; a != "" {
		if err := checkListenAddress(a); err != nil {
			report("metrics.address", "%v", err)
		}
	}
	c.Log.validate(report)
}

func (k *KubernetesConfig) validate(report reportFunc) {
	if k.Kubeconfig != "" && !filepath.IsAbs(k.Kubeconfig) {
		report("kubernetes.kubeconfig", "must be an absolute path, got %q", k.Kubeconfig)
	}
	if n := k.NodeName; n != "" {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			report("kubernetes.node_name", "%q is not a valid node name: %s", n, strings.Join(errs, "; "))
		}
	}
}

func (s *SentinelConfig) validate(report reportFunc) {
	switch {
	case len(s.Command) > 0:
		argv(report, "sentinel.command", s.Command, false)
		if len(s.RebootExitCodes) == 0 {
			report("sentinel.reboot_exit_codes", "must list at least one exit code that means a reboot is needed")
		}
	case s.File == "":
		report("sentinel.file", "set sentinel.file or sentinel.command: nothing would tell that a reboot is needed")
	}
	if s.File != "" && !filepath.IsAbs(s.File) {
		report("sentinel.file", "must be an absolute path, got %q", s.File)
	}
	for i, c := range s.RebootExitCodes {
		if c < 0 || c > 255 {
			report(fmt.Sprintf("sentinel.reboot_exit_codes[%d]", i), "exit codes are 0 to 255, got %d", c)
		}
	}
	positive(report, "sentinel.command_timeout", s.CommandTimeout)
	atLeast(report, "sentinel.period", s.Period, time.Second)
}

func (w *WindowConfig) validate(report reportFunc) {
	if len(w.Days) == 0 {
		report("window.days", "must list at least one day, or no reboot could ever start")
	}
	seen := map[Weekday]bool{}
	for i, d := range w.Days {
		if seen[d] {
			report(fmt.Sprintf("window.days[%d]", i), "%q is listed twice", d)
		}
		seen[d] = true
	}
	if w.Start == EndOfDay {
		report("window.start", `"24:00" is only valid as window.end; use "00:00"`)
	}
	if w.Start == w.End && w.Start != EndOfDay {
		report("window.end", "the window is empty: end equals start (%s); for the whole day use start = \"00:00\", end = \"24:00\"", w.Start)
	}
}

func (l *LockConfig) validate(report reportFunc) {
	if l.Concurrency < 1 {
		report("lock.concurrency", "must be at least 1, got %d", l.Concurrency)
	}
	if len(l.Groups) > claim.MaxGroupRules {
		report("lock.groups", "has %d rules, more than the %d a claim may publish (another node's claim with more cannot be read)", len(l.Groups), claim.MaxGroupRules)
	}
	seen := map[string]int{}
	for i, g := range l.Groups {
		key := fmt.Sprintf("lock.groups[%d]", i)
		switch errs := validation.IsQualifiedName(g.Label); {
		case g.Label == "":
			report(key+".label", "is missing: name the node label that defines the group, such as %q", ZoneLabel)
		case len(errs) > 0:
			report(key+".label", "%q is not a valid label name: %s", g.Label, strings.Join(errs, "; "))
		}
		if j, dup := seen[g.Label]; dup && g.Label != "" {
			report(key+".label", "%q already has a limit in lock.groups[%d]", g.Label, j)
		}
		seen[g.Label] = i
		if g.Max < 1 {
			report(key+".max", "must be at least 1, got %d", g.Max)
		}
	}
	positive(report, "lock.alarm_age", l.AlarmAge)
	positive(report, "lock.entering_alarm_age", l.EnteringAlarmAge)
	nonNegative(report, "lock.ttl", l.TTL)
	nonNegative(report, "lock.release_delay", l.ReleaseDelay)
	positive(report, "lock.waiting_grace", l.WaitingGrace)
}

func (b *BlockersConfig) validate(report reportFunc) {
	p := &b.Prometheus
	u := p.URL.URL()
	if u != nil && u.Scheme != "http" && u.Scheme != "https" {
		report("blockers.prometheus.url", "must be an http:// or https:// URL, got scheme %q", u.Scheme)
	}
	for _, f := range p.files() {
		if f.path != "" && !filepath.IsAbs(f.path) {
			report(f.key, "must be an absolute path, got %q", f.path)
		}
	}
	p.validateAuth(report, u)
	if u != nil && u.Scheme == "http" && p.CAFile != "" {
		report("blockers.prometheus.ca_file", "is set, but the URL is http://, which uses no certificate: use https://")
	}
	positive(report, "blockers.prometheus.timeout", p.Timeout)
}

// validateAuth: basic authentication takes a user name and a password file, a request one credential.
func (p *PrometheusConfig) validateAuth(report reportFunc, u *url.URL) {
	switch {
	case p.PasswordFile != "" && p.Username == "":
		report("blockers.prometheus.username", "must be set with blockers.prometheus.password_file: the user name for basic authentication")
	case p.Username != "" && p.PasswordFile == "":
		report("blockers.prometheus.password_file", "must be set with blockers.prometheus.username: the file holding the password")
	}
	if p.PasswordFile != "" && p.BearerTokenFile != "" {
		report("blockers.prometheus.bearer_token_file", "set either password_file or bearer_token_file, not both: a request carries one Authorization header")
	}
	if u != nil && u.User != nil && (p.PasswordFile != "" || p.BearerTokenFile != "") {
		report("blockers.prometheus.url", "has a user name or password in it as well as password_file or bearer_token_file: remove them from the URL")
	}
}

// credentialFile is one of the files a configuration key names.
type credentialFile struct{ key, path string }

// files lists the credential files of the Prometheus blocker.
func (p *PrometheusConfig) files() []credentialFile {
	return []credentialFile{
		{"blockers.prometheus.password_file", p.PasswordFile},
		{"blockers.prometheus.bearer_token_file", p.BearerTokenFile},
		{"blockers.prometheus.ca_file", p.CAFile},
	}
}

func (d *DrainConfig) validate(report reportFunc) {
	if d.GracePeriod >= 0 && d.GracePeriod.Std()%time.Second != 0 {
		report("drain.grace_period", "must be whole seconds (Kubernetes counts grace periods in seconds), got %s", d.GracePeriod)
	}
	nonNegative(report, "drain.timeout", d.Timeout)
	nonNegative(report, "drain.skip_wait_for_delete_timeout", d.SkipWaitForDeleteTimeout)
	nonNegative(report, "drain.delay", d.Delay)
}

func (r *RebootConfig) validate(report reportFunc) {
	switch r.Method {
	case RebootLogind:
	case RebootCommand:
		argv(report, "reboot.command", r.Command, true)
	default:
		report("reboot.method", "must be %q or %q, got %q", RebootLogind, RebootCommand, r.Method)
	}
	nonNegative(report, "reboot.delay", r.Delay)
	positive(report, "reboot.timeout", r.Timeout)
}

func (n *NodeConfig) validate(report reportFunc) {
	for _, set := range []struct {
		key    string
		labels map[string]string
	}{{"node.pre_reboot_labels", n.PreRebootLabels}, {"node.post_reboot_labels", n.PostRebootLabels}} {
		for _, k := range sortedKeys(set.labels) {
			key := joinKey(set.key, k)
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				report(key, "%q is not a valid label name: %s", k, strings.Join(errs, "; "))
			} else if why := forbiddenSelfLabel(k); why != "" {
				report(key, "%s", why)
			}
			if errs := validation.IsValidLabelValue(set.labels[k]); len(errs) > 0 {
				report(key, "%q is not a valid label value: %s", set.labels[k], strings.Join(errs, "; "))
			}
		}
	}
}

// forbiddenSelfLabel says why a node may not set label k on its own Node
// (the NodeRestriction admission plugin), or returns "".
func forbiddenSelfLabel(k string) string {
	prefix, _, found := strings.Cut(k, "/")
	if !found {
		return ""
	}
	if k == strings.TrimSuffix(ClaimPrefix, "/") || strings.HasPrefix(k, ClaimPrefix) {
		return fmt.Sprintf("the %s prefix is kured-host's own claim", ClaimPrefix)
	}
	for _, allowed := range []string{"kubelet.kubernetes.io", "node.kubernetes.io"} {
		if prefix == allowed || strings.HasSuffix(prefix, "."+allowed) {
			return ""
		}
	}
	for _, reserved := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == reserved || strings.HasSuffix(prefix, "."+reserved) {
			return fmt.Sprintf("a node may not set %s labels on itself (NodeRestriction); use your own prefix such as example.com/", reserved)
		}
	}
	return ""
}

func (l *LogConfig) validate(report reportFunc) {
	if !slices.Contains([]string{LogText, LogJSON}, l.Format) {
		report("log.format", "must be %q or %q, got %q", LogText, LogJSON, l.Format)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, l.Level) {
		report("log.level", `must be "debug", "info", "warn" or "error", got %q`, l.Level)
	}
}

func checkListenAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("must be host:port such as \"127.0.0.1:9779\", got %q", a)
	}
	// A name other than localhost is not resolved here: a misspelt one
	// would only fail to listen, and be tried again for ever.
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return fmt.Errorf("the host must be an IP address of this machine, \"localhost\" or empty (every interface), got %q", host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port must be 1 to 65535, got %q", port)
	}
	return nil
}

func argv(report reportFunc, key string, cmd []string, required bool) {
	switch {
	case len(cmd) == 0 && required:
		report(key, "must name the program to run, as an array such as [\"/bin/systemctl\", \"reboot\"]")
	case len(cmd) > 0 && strings.TrimSpace(cmd[0]) == "":
		report(key+"[0]", "the program name must not be empty")
	case len(cmd) == 1 && strings.Contains(cmd[0], " "):
		report(key, "%q is one word with spaces in it: write each argument as its own array element (no shell is used)", cmd[0])
	}
}

func positive(report reportFunc, key string, d Duration) {
	if d <= 0 {
		report(key, "must be more than 0, got %s", d)
	}
}

func nonNegative(report reportFunc, key string, d Duration) {
	if d < 0 {
		report(key, "must not be negative, got %s", d)
	}
}

func atLeast(report reportFunc, key string, d Duration, floor time.Duration) {
	if d.Std() < floor {
		report(key, "must be at least %s, got %s", Duration(floor), d)
	}
}

// Warnings lists what a valid configuration does that deserves a look:
// credentials sent where anyone on the path can read them. The daemon
// logs them when it starts; check prints them.
func (c *Config) Warnings() []string {
	var out []string
	p := c.Blockers.Prometheus
	if u := p.URL.URL(); u != nil && u.Scheme == "http" {
		var creds []string
		if u.User != nil {
			creds = append(creds, "the user name and password in the URL")
		}
		if p.PasswordFile != "" {
			creds = append(creds, "the password of blockers.prometheus.password_file")
		}
		if p.BearerTokenFile != "" {
			creds = append(creds, "the token of blockers.prometheus.bearer_token_file")
		}
		if len(creds) > 0 {
			out = append(out, fmt.Sprintf("blockers.prometheus.url %s is http://: %s cross the network in the clear at every request; use https://",
				p.URL, strings.Join(creds, " and ")))
		}
	}
	return out
}
