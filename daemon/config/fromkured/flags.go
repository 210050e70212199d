package fromkured

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/redact"
)

// flagDef is one of kured's flags: how kured reads it, its default in
// kured (cmd/kured/main.go), and how it becomes kured-host's key. Which
// key, and why a flag has none, is config.KuredOptions' to say: the
// converters name their key through it.
type flagDef struct {
	kind kind
	def  string
	conv func(*conv, *value)
	// always: converted even when not given, since kured's default does
	// something kured-host's does not.
	always bool
	// secret: its value may carry credentials and is never shown.
	secret bool
	// commentOnly: it sets no key, so a value that cannot be read is no
	// loss.
	commentOnly bool
	// command: kured splits its value into words (splitWords).
	command bool
}

// flagTable has every flag of config.KuredOptions (a test keeps them in
// step).
var flagTable = map[string]flagDef{
	"--node-id":                      {kind: kString, conv: nodeID, commentOnly: true},
	"--period":                       {kind: kDuration, def: "1h0m0s", conv: period},
	"--reboot-sentinel":              {kind: kString, def: "/var/run/reboot-required", conv: sentinelFile},
	"--reboot-sentinel-command":      {kind: kString, conv: sentinelCommand, command: true},
	"--reboot-days":                  {kind: kSlice, def: "su,mo,tu,we,th,fr,sa", conv: rebootDays},
	"--start-time":                   {kind: kString, def: "0:00", conv: startTime},
	"--end-time":                     {kind: kString, def: "23:59:59", conv: endTime},
	"--time-zone":                    {kind: kString, def: "UTC", conv: timeZone},
	"--concurrency":                  {kind: kInt, def: "1", conv: concurrency},
	"--lock-ttl":                     {kind: kDuration, def: "0s", conv: lockTTL},
	"--lock-release-delay":           {kind: kDuration, def: "0s", conv: duration},
	"--lock-annotation":              {kind: kString, def: "weave.works/kured-node-lock", conv: noCounterpart, commentOnly: true},
	"--ds-name":                      {kind: kString, def: "kured", conv: noCounterpart, commentOnly: true},
	"--ds-namespace":                 {kind: kString, def: "kube-system", conv: noCounterpart, commentOnly: true},
	"--drain-grace-period":           {kind: kInt, def: "-1", conv: drainGracePeriod},
	"--drain-timeout":                {kind: kDuration, def: "0s", conv: duration},
	"--drain-pod-selector":           {kind: kString, conv: plain},
	"--drain-delay":                  {kind: kDuration, def: "0s", conv: duration},
	"--skip-wait-for-delete-timeout": {kind: kInt, def: "0", conv: skipWait},
	"--force-reboot":                 {kind: kBool, def: "false", conv: boolean},
	"--reboot-delay":                 {kind: kDuration, def: "0s", conv: duration},
	"--reboot-method":                {kind: kString, def: "command", conv: rebootMethod},
	"--reboot-command":               {kind: kString, def: "/bin/systemctl reboot", conv: rebootCommand, command: true},
	"--reboot-signal":                {kind: kInt, def: "39", conv: noCounterpart, commentOnly: true},
	"--blocking-pod-selector":        {kind: kArray, conv: podSelectors},
	"--prometheus-url":               {kind: kString, conv: prometheusURL, secret: true},
	"--alert-filter-regexp":          {kind: kRegexp, conv: plain},
	"--alert-filter-match-only":      {kind: kBool, def: "false", conv: boolean},
	"--alert-firing-only":            {kind: kBool, def: "false", conv: boolean},
	"--notify-url":                   {kind: kString, conv: notifyURL, secret: true},
	"--slack-hook-url":               {kind: kString, conv: slackHookURL, secret: true},
	"--slack-username":               {kind: kString, def: "kured", conv: slackUnused, commentOnly: true},
	"--slack-channel":                {kind: kString, conv: slackUnused, commentOnly: true},
	"--message-template-drain":       {kind: kString, def: "Draining node %s", conv: messageTemplate},
	"--message-template-reboot":      {kind: kString, def: "Rebooting node %s", conv: messageTemplate},
	"--message-template-uncordon":    {kind: kString, def: "Node %s rebooted & uncordoned successfully!", conv: messageTemplate},
	"--pre-reboot-node-labels":       {kind: kSlice, conv: nodeLabels},
	"--post-reboot-node-labels":      {kind: kSlice, conv: nodeLabels},
	"--annotate-nodes":               {kind: kBool, def: "false", conv: boolean},
	"--prefer-no-schedule-taint":     {kind: kString, conv: preferNoScheduleTaint, commentOnly: true},
	"--log-format":                   {kind: kString, def: "text", conv: logFormat},
	"--metrics-host":                 {kind: kString, conv: func(*conv, *value) {}}, // with --metrics-port
	"--metrics-port":                 {kind: kInt, def: "8080", conv: metrics, always: true},
}

// spacing is what d's value may hold besides printing characters: a
// command's words may be separated by tabs and line feeds, as kured
// splits them.
func (d flagDef) spacing() string {
	if d.command {
		return spacing
	}
	return ""
}

func option(flag string) config.KuredOption {
	i := optionIndex(flag)
	if i == len(config.KuredOptions) {
		return config.KuredOption{Flag: flag}
	}
	return config.KuredOptions[i]
}

func optionIndex(flag string) int {
	i := slices.IndexFunc(config.KuredOptions, func(o config.KuredOption) bool { return o.Flag == flag })
	if i < 0 {
		return len(config.KuredOptions)
	}
	return i
}

func optionKey(flag string) string { return option(flag).Key }

// hideSecret shows a use of a flag whose value may hold credentials
// ("--notify-url=slack://…") as redact shows a URL.
func hideSecret(flag, shown string) string {
	name, val, ok := strings.Cut(shown, "=")
	if !ok || !flagTable[flag].secret || onlyReferences.MatchString(val) {
		return shown
	}
	return name + "=" + redact.String(stripQuotes(val))
}

// onlyReferences is a value made of $(NAME) alone: it shows no secret.
var onlyReferences = regexp.MustCompile(`^(\$\([A-Za-z_][A-Za-z0-9_.-]*\))+$`)

// stripQuotes removes one pair of quotes around s, as kured does for
// its notify URLs.
func stripQuotes(s string) string {
	if len(s) > 2 && s[0] == s[len(s)-1] && (s[0] == '"' || s[0] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

func durationsEqual(a, b string) bool {
	x, err1 := time.ParseDuration(a)
	y, err2 := time.ParseDuration(b)
	return err1 == nil && err2 == nil && x == y
}

// Converters. Each writes one entry for its flag; values kured refuses
// never reach them (see conv.convert).

func noCounterpart(c *conv, v *value) { c.comment(v, "", option(v.flag).Note) }

func nodeID(c *conv, v *value) {
	note := option(v.flag).Note
	c.comment(v, "", "not needed: "+strings.ToLower(note[:1])+note[1:])
}

func plain(c *conv, v *value) { c.set(v, v.text) }

func boolean(c *conv, v *value) { c.set(v, v.text == "true") }

func duration(c *conv, v *value) {
	d, _ := time.ParseDuration(v.text)
	c.set(v, config.Duration(d))
}

func period(c *conv, v *value) {
	d, _ := time.ParseDuration(v.text)
	c.set(v, config.Duration(d), "kured-host watches the sentinel file with inotify: the period is only its fallback re-check (and the interval of a sentinel command)")
}

func sentinelFile(c *conv, v *value) {
	if c.value("--reboot-sentinel-command").text != "" {
		c.comment(v, "sentinel", "kured does not look at the file when --reboot-sentinel-command is given")
		return
	}
	host, via, err := c.src.hostPath(v.text)
	if err != nil {
		c.refuse(v, "sentinel", err.Error()+": set sentinel.file by hand")
		return
	}
	var notes []string
	if via != "" {
		notes = append(notes, fmt.Sprintf("the host's %s, %s", host, via))
	}
	if !c.src.InPod && strings.HasPrefix(host, "/sentinel/") {
		// Without the DaemonSet its volumes are unknown, but kured's chart
		// and manifest mount the host's /var/run there.
		notes = append(notes, "kured's chart mounts the host's /var/run at /sentinel: the host's path is likely /run/"+strings.TrimPrefix(host, "/sentinel/")+"; check it, or give the DaemonSet instead of the flags")
		c.warn("%s: a path in kured's container; check sentinel.file", strings.Join(v.shown, ", "))
	}
	if rest, ok := strings.CutPrefix(host, "/var/run/"); ok {
		host = "/run/" + rest
		notes = append(notes, fmt.Sprintf("that is %s (/var/run is a symlink to /run)", host))
	}
	c.set(v, host, notes...)
}

func sentinelCommand(c *conv, v *value) {
	words, err := splitWords(v.text)
	if err != nil {
		c.refuse(v, "sentinel", fmt.Sprintf("kured cannot split it into words (%v) and would not start", err))
		return
	}
	if len(words) == 0 {
		c.set(v, []string{})
		return
	}
	c.set(v, words,
		"kured split it into words and ran them with nsenter in the host's mount namespace; kured-host runs them on the host, with no shell, for at most sentinel.command_timeout",
		"exit status 0 means a reboot is needed, as in kured (sentinel.reboot_exit_codes)")
}

// kuredTime reads a time of day as kured does, in seconds since midnight.
func kuredTime(s string) (int, error) {
	for _, layout := range []string{"15:04", "15:04:05", "03:04pm", "15", "03pm", "3pm"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.Hour()*3600 + t.Minute()*60 + t.Second(), nil
		}
	}
	return 0, fmt.Errorf("kured reads times such as 23:00, 23:00:00, 11:00pm, 23 or 11pm")
}

// window is kured's --start-time and --end-time as kured-host has them.
// kured's end includes its whole last second, so an end of 23:59:59 is
// kured-host's 24:00 (04:59:59 is 05:00); a start after the end crosses
// midnight in both.
type window struct {
	start, end int
	empty      bool // start equals end: one second a day, which kured-host has no way to say
	whole      bool // the end one second before the start: all day
	crosses    bool
}

func (c *conv) window() (window, bool) {
	s, err1 := kuredTime(c.value("--start-time").text)
	e, err2 := kuredTime(c.value("--end-time").text)
	if err1 != nil || err2 != nil {
		return window{}, false
	}
	w := window{start: s, end: e}
	if e%60 == 59 {
		w.end = e + 1
	}
	switch {
	case s == e:
		w.empty = true
	case s > e && w.end == s:
		w.whole = true
	case s > e:
		w.crosses = true
	}
	return w, true
}

func startTime(c *conv, v *value) { windowEdge(c, v, false) }

func endTime(c *conv, v *value) { windowEdge(c, v, true) }

func windowEdge(c *conv, v *value, isEnd bool) {
	t, err := kuredTime(v.text)
	if err != nil {
		c.refuse(v, "window", err.Error()+", and would not start with this one")
		return
	}
	w, ok := c.window()
	switch {
	case ok && w.empty:
		c.refuse(v, "window", "kured's window from --start-time to --end-time is one second a day, which kured-host cannot express: set window.start and window.end by hand")
		return
	case ok && w.whole:
		c.comment(v, "window", "with the other end, kured's window is the whole day, as kured-host's default window is")
		return
	}
	if !isEnd {
		c.set(v, config.TimeOfDay(t))
		return
	}
	var notes []string
	if t%60 == 59 {
		t++
		notes = append(notes, fmt.Sprintf("kured's window includes the end's last second: %s", config.TimeOfDay(t)))
	}
	c.set(v, config.TimeOfDay(t), notes...)
}

// kuredDay reads a day as kured does: a name ("mo", "mon", "monday") or
// a number from 0 (Sunday) to 6.
func kuredDay(s string) (config.Weekday, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 || n > 6 {
			return 0, fmt.Errorf("day %d is not from 0 (Sunday) to 6", n)
		}
		return config.Weekday(n), nil
	}
	var d config.Weekday
	err := d.UnmarshalText([]byte(s))
	return d, err
}

func rebootDays(c *conv, v *value) {
	var days []config.Weekday
	for _, s := range v.list {
		if s == "" {
			continue
		}
		d, err := kuredDay(s)
		if err != nil {
			c.refuse(v, "window", fmt.Sprintf("kured refuses %q (%v) and would not start", s, err))
			return
		}
		if !slices.Contains(days, d) {
			days = append(days, d)
		}
	}
	if len(days) == 0 {
		c.refuse(v, "window", "no day: kured never rebooted, and kured-host needs at least one day (to keep nodes from rebooting, hold them: kured-host hold)")
		return
	}
	slices.Sort(days)
	var notes []string
	if w, ok := c.window(); ok && w.crosses && len(days) < 7 {
		notes = append(notes, "the window crosses midnight, and the days mean something else: kured let a reboot start on a listed day from 00:00 to the end time and from the start time to 24:00, kured-host from the start time of a listed day to the end time of the day after")
	}
	c.set(v, days, notes...)
}

func timeZone(c *conv, v *value) {
	name := v.text
	var notes []string
	if name == "Local" {
		if tz, ok := c.src.literalEnv("TZ"); ok && tz != "" {
			name = strings.TrimPrefix(tz, ":")
			notes = append(notes, fmt.Sprintf("kured's Local was its container's zone, TZ=%s; kured-host's Local is the host's", tz))
		} else {
			name = "UTC"
			notes = append(notes, "kured's Local was its container's zone, UTC unless TZ was set there; kured-host's Local is the host's")
		}
	}
	var loc config.Location
	if err := loc.UnmarshalText([]byte(name)); err != nil {
		c.refuse(v, "window", fmt.Sprintf("kured refuses an unknown time zone and would not start (%v)", err))
		return
	}
	c.set(v, loc, notes...)
}

func concurrency(c *conv, v *value) {
	n, _ := strconv.Atoi(v.text)
	var notes []string
	if n < 1 {
		notes = append(notes, fmt.Sprintf("kured takes %d as 1", n))
		n = 1
	}
	if n > 1 {
		for _, g := range config.Default().Lock.Groups {
			notes = append(notes, fmt.Sprintf("kured-host also lets at most %d node with the same %s label reboot at once by default (lock.groups): to let %d nodes of one zone reboot together, as kured did, write groups = [] under [lock]", g.Max, g.Label, n))
		}
	}
	c.set(v, n, notes...)
}

func lockTTL(c *conv, v *value) {
	d, _ := time.ParseDuration(v.text)
	if d <= 0 {
		c.set(v, config.Duration(0), "kured takes 0 or less as off")
		return
	}
	c.set(v, config.Duration(d), "as in kured, a slot held this long is freed whatever its node is doing, which may let another node go down while this one is still down (docs/configuration.md, The lock in brief)")
}

func drainGracePeriod(c *conv, v *value) {
	n, _ := strconv.Atoi(v.text)
	if n < 0 {
		c.set(v, -config.Duration(time.Second), "negative: each pod's own grace period")
		return
	}
	c.set(v, config.Duration(time.Duration(n)*time.Second), "kured counts seconds; kured-host takes a duration")
}

func skipWait(c *conv, v *value) {
	n, _ := strconv.Atoi(v.text)
	c.set(v, config.Duration(time.Duration(max(n, 0))*time.Second), "kured counts seconds; kured-host takes a duration")
}

func rebootMethod(c *conv, v *value) {
	switch v.text {
	case "command":
		if c.value("--reboot-command").given {
			c.comment(v, "reboot", "see --reboot-command")
		} else {
			c.comment(v, "reboot", "with kured's default command, /bin/systemctl reboot: "+systemctlNote)
		}
	case "signal":
		sig := c.value("--reboot-signal").text
		c.comment(v, "reboot", fmt.Sprintf("kured sent signal %s to systemd (PID 1) to reboot; kured-host's default method, \"logind\", asks logind over D-Bus and sees a refusal", sig))
	default:
		c.refuse(v, "reboot", "kured knows only the methods command and signal, and would not start")
	}
}

const systemctlNote = "kured ran it with nsenter in the host's mount namespace; kured-host's default method, \"logind\", asks logind over D-Bus, as systemctl reboot does, and sees a refusal"

// systemctlReboot is kured's default command and what it is written as.
var systemctlReboot = [][]string{{"/bin/systemctl", "reboot"}, {"/usr/bin/systemctl", "reboot"}, {"systemctl", "reboot"}}

func rebootCommand(c *conv, v *value) {
	if c.value("--reboot-method").text == "signal" {
		c.comment(v, "reboot", "kured does not run it with --reboot-method=signal")
		return
	}
	words, err := splitWords(v.text)
	switch {
	case err != nil:
		c.refuse(v, "reboot", fmt.Sprintf("kured cannot split it into words (%v) and would not start", err))
		return
	case len(words) == 0:
		c.refuse(v, "reboot", "kured refuses an empty reboot command and would not start")
		return
	}
	if slices.ContainsFunc(systemctlReboot, func(w []string) bool { return slices.Equal(w, words) }) {
		note := systemctlNote
		if c.atKuredDefault(v) {
			note = "kured's default; " + note
		}
		c.comment(v, "reboot", note)
		return
	}
	c.setKeys(v, "reboot", true, []string{"method", "command"}, []any{config.RebootCommand, words},
		"kured split it into words and ran them with nsenter in the host's mount namespace; kured-host runs them on the host, with no shell, for at most reboot.timeout")
}

func podSelectors(c *conv, v *value) {
	sels := []string{}
	var notes []string
	for _, s := range v.list {
		var sel config.Selector
		if err := sel.UnmarshalText([]byte(s)); err != nil {
			why := fmt.Sprintf("left out %q, not a label selector: kured's pod query failed with it, which blocked every reboot", s)
			notes = append(notes, why)
			c.warn("--blocking-pod-selector: %s", why)
			continue
		}
		if !slices.Contains(sels, s) {
			sels = append(sels, s)
		}
	}
	c.set(v, sels, notes...)
}

// inCluster reports whether host is a name only the cluster's DNS
// resolves: a Service's ("prometheus.monitoring.svc") or a bare name.
func inCluster(host string) bool {
	if host == "" || host == "localhost" || net.ParseIP(host) != nil {
		return false
	}
	return strings.HasSuffix(host, ".svc") || strings.Contains(host, ".svc.") || !strings.Contains(host, ".")
}

func prometheusURL(c *conv, v *value) {
	var notes []string
	if u, err := url.Parse(v.text); err == nil && v.text != "" {
		if u.User != nil {
			notes = append(notes, "it holds credentials: kured-host can read them from files instead (blockers.prometheus.username with password_file, or bearer_token_file)")
		}
		if inCluster(u.Hostname()) {
			notes = append(notes, "kured asked it from inside the cluster; a host does not resolve the cluster's DNS names as a rule: use an address the host reaches")
		}
	}
	c.set(v, v.text, notes...)
}

func notifyURL(c *conv, v *value) {
	u := stripQuotes(v.text)
	if u == "" {
		c.set(v, []string{})
		return
	}
	var notes []string
	if v.uses > 1 {
		notes = append(notes, "kured used only the last one given, as here")
	}
	if inCluster(hostOf(u)) {
		notes = append(notes, "kured sent it from inside the cluster; a host does not resolve the cluster's DNS names as a rule")
	}
	c.set(v, []string{u}, notes...)
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || !redact.ShowsHost(u.Scheme) {
		return ""
	}
	return u.Hostname()
}

func slackHookURL(c *conv, v *value) {
	hook := stripQuotes(v.text)
	switch {
	case hook == "":
		c.comment(v, "notify", "empty: no notifications")
		return
	case stripQuotes(c.value("--notify-url").text) != "":
		c.comment(v, "notify", "kured ignores it when --notify-url is given")
		return
	}
	u, err := url.Parse(hook)
	if err != nil {
		c.refuse(v, "notify", "kured sent no notification with it: it is not a URL")
		return
	}
	p := strings.ReplaceAll(u.Path, "/services/", "")
	if len(strings.Split(p, "/")) != 3 {
		c.refuse(v, "notify", "kured sent no notification with it: it is not a Slack webhook URL such as https://hooks.slack.com/services/T…/B…/…")
		return
	}
	c.set(v, []string{"slack://" + p}, "deprecated in kured, which made shoutrrr's slack:// URL of it, as written here")
}

func slackUnused(c *conv, v *value) {
	c.comment(v, "notify", fmt.Sprintf("kured %s does not use it: the slack:// URL it makes of --slack-hook-url names no user or channel", kuredVersion))
}

// printfVerb is a verb of kured's fmt.Sprintf template.
var printfVerb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z%]`)

// goTemplate turns kured's message template (fmt.Sprintf with the node's
// name) into kured-host's (text/template, {{.Node}}).
func goTemplate(s string) (string, []string) {
	var b strings.Builder
	var notes []string
	nodes, last := 0, 0
	literal := func(t string) { b.WriteString(strings.ReplaceAll(t, "{{", `{{"{{"}}`)) }
	for _, m := range printfVerb.FindAllStringIndex(s, -1) {
		literal(s[last:m[0]])
		last = m[1]
		verb := s[m[0]:m[1]]
		switch verb[len(verb)-1] {
		case '%':
			b.WriteString("%")
		case 's', 'v':
			nodes++
			b.WriteString("{{.Node}}")
		case 'q':
			nodes++
			b.WriteString(`{{printf "%q" .Node}}`)
		default:
			b.WriteString(verb)
			notes = append(notes, fmt.Sprintf("%s is not for a name: kured printed a %%!%c(string=…) error there; kept as written", verb, verb[len(verb)-1]))
		}
	}
	literal(s[last:])
	switch {
	case nodes == 0:
		notes = append(notes, "it has no %s: kured added the node's name as %!(EXTRA string=…); kured-host's message is the text alone")
	case nodes > 1:
		notes = append(notes, "kured filled in only the first %s (the others read %!s(MISSING)); here each is the node's name")
	}
	if nodes > 0 {
		notes = append(notes, "kured's %s is {{.Node}} in kured-host's Go template")
	}
	return b.String(), notes
}

func messageTemplate(c *conv, v *value) {
	text, notes := goTemplate(v.text)
	c.set(v, text, notes...)
}

func nodeLabels(c *conv, v *value) {
	table := optionKey(v.flag)
	var keys []string
	vals := map[string]string{}
	var notes []string
	for _, l := range v.list {
		if l == "" {
			continue
		}
		parts := strings.Split(l, "=")
		if len(parts) < 2 {
			why := fmt.Sprintf("left out %q: not key=value (kured crashed on it)", l)
			notes = append(notes, why)
			c.warn("%s: %s", v.flag, why)
			continue
		}
		if len(parts) > 2 {
			notes = append(notes, fmt.Sprintf("kured took %q as the value of %q, as here", parts[1], parts[0]))
		}
		if _, seen := vals[parts[0]]; !seen {
			keys = append(keys, parts[0])
		}
		vals[parts[0]] = parts[1]
	}
	if v.flag == "--post-reboot-node-labels" && len(keys) > 0 {
		notes = append(notes, "kured set them after the uncordon; kured-host sets them after the reboot, right before it")
	}
	if len(keys) == 0 {
		c.comment(v, table, append(notes, "no labels, as kured-host's default")...)
		return
	}
	var anys []any
	for _, k := range keys {
		anys = append(anys, vals[k])
	}
	c.setKeys(v, table, false, keys, anys, notes...)
}

func preferNoScheduleTaint(c *conv, v *value) {
	if v.text == "" {
		c.comment(v, "", "empty: kured set no taint")
		return
	}
	// The reason is written here rather than taken from the table's note:
	// this comment points at what to do instead.
	c.comment(v, "", fmt.Sprintf(
		"a node may not taint itself (NodeRestriction), so kured-host sets no taint; a node that needs a reboot carries the label %s=%s (then %s and %s while it reboots): pods can prefer other nodes with a preferred node affinity on the key %s, operator DoesNotExist; the node is cordoned when it takes its slot",
		claim.Label, claim.Waiting, claim.Entering, claim.Holding, claim.Label))
}

func logFormat(c *conv, v *value) {
	if v.text == config.LogJSON {
		c.set(v, config.LogJSON)
		return
	}
	var notes []string
	if v.text != config.LogText {
		notes = append(notes, "kured logs text for any format but json")
	}
	c.set(v, config.LogText, notes...)
}

// metrics: kured always served its metrics, in its pod's network unless
// the pod had the host's; kured-host serves none unless asked to.
func metrics(c *conv, v *value) {
	host, port := c.value("--metrics-host"), v
	addr := net.JoinHostPort(host.text, port.text)
	if !host.given && !port.given {
		v = &value{flag: v.flag, shown: []string{fmt.Sprintf("--metrics-port=%s (kured's default)", port.text)}}
	}
	if c.src.InPod && c.src.HostNetwork {
		notes := []string{"kured, on the host's network, served its metrics there"}
		if host.text == "" {
			notes = append(notes, "on every interface of the host (kured-host check warns): name one, such as 127.0.0.1:"+port.text)
		}
		e := c.newEntry("metrics", host, v)
		e.notes = append(e.notes, notes...)
		e.kvs = append(e.kvs, kv{full: "metrics.address", line: "address = " + mustTOML(addr)})
		return
	}
	where := "port " + port.text + " of its pod's address"
	if host.text != "" {
		where = addr
	}
	e := c.newEntry("metrics", host, v)
	e.notes = append(e.notes, fmt.Sprintf(
		"kured served its metrics on %s; kured-host serves none unless metrics.address is set, such as \"127.0.0.1:9779\" (\":9779\": every interface of the host, for a Prometheus elsewhere, behind a firewall)", where))
}

func mustTOML(s string) string {
	t, err := tomlValue(s)
	if err != nil {
		return strconv.Quote(s)
	}
	return t
}
