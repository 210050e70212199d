package config

import (
	"encoding"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/kured-host/kured-host/daemon/redact"
)

// Loaded is a validated configuration and where each of its keys came from.
type Loaded struct {
	Config Config
	// Files are the files read, main file first, then drop-ins in order.
	Files []string
	// Origins maps each key set by a file (dotted path, array elements as
	// "key[i]") to the file and line that set it last.
	Origins map[string]Origin
}

// Load reads the file at path and then every *.toml file in the config.d
// directory next to it, in lexical order, over Default(). A later file wins
// key by key: tables merge, while an array is replaced as a whole. With
// t.Enforce, a file or directory that another user than t.Owner could
// have written is refused (see Trust). Every problem in every file is
// reported in one *Error.
func Load(path string, t Trust) (*Loaded, error) {
	return LoadWithCluster(path, t, "")
}

// ClusterSource is where the cluster's settings come from, as messages
// and origins name it ("file:line" for a host's file).
const ClusterSource = "ConfigMap kube-system/kured-host, config.toml"

// ClusterKey is a key the cluster's settings may set, and why a host
// may take it from whoever can write the ConfigMap: none carries a secret
// or names a file on the host, and none says where a host's secret goes.
type ClusterKey struct{ Key, Why string }

// ClusterKeys are the keys the cluster's settings may set, an allow-list
// of leaves (an array's elements come with it). Everything else is about
// one host (its sentinel, its reboot, its drain, its credentials and
// files, the lock's timings) and stays in its files. docs/configuration.md
// lists them from here.
var ClusterKeys = []ClusterKey{
	{"lock.concurrency", "a limit: the strictest any node publishes binds every node"},
	{"lock.groups", "limits per group of nodes (label and max), as lock.concurrency"},
	{"window.days", "when reboots may start: the same for every node"},
	{"window.start", "as window.days"},
	{"window.end", "as window.days"},
	{"window.time_zone", "as window.days"},
	{"blockers.pod_selectors", "which pods on a node hold its reboot back"},
	{"blockers.inhibitors", "whether logind's inhibitors hold a reboot back"},
	{"blockers.prometheus.url", "the Prometheus asked for alerts, with no credentials in it, " +
		"and only on a node whose own files set no credentials for it (a host's credentials go only to a URL from its own files)"},
	{"blockers.prometheus.alert_filter_regexp", "which alerts count"},
	{"blockers.prometheus.alert_filter_match_only", "which alerts count"},
	{"blockers.prometheus.alert_firing_only", "which alerts count"},
	{"blockers.prometheus.timeout", "how long to wait for Prometheus"},
}

// prometheusCredentials are the keys whose values a request to the
// Prometheus URL carries (the password and token files' contents): they
// and the URL must come from the same layer, a host's files.
var prometheusCredentials = []string{
	"blockers.prometheus.username", "blockers.prometheus.password_file", "blockers.prometheus.bearer_token_file",
}

// IsClusterKey reports whether the cluster's settings may set key (a
// dotted path; an array's elements as "key[i]").
func IsClusterKey(key string) bool { return clusterKey(key) }

func clusterKey(key string) bool {
	if key == "version" {
		return true
	}
	for _, k := range ClusterKeys {
		if key == k.Key || strings.HasPrefix(key, k.Key+"[") {
			return true
		}
	}
	return false
}

// hostOnlyWhy says why a key is not among ClusterKeys, for the error.
func hostOnlyWhy(key string) string {
	switch {
	case slices.Contains(prometheusCredentials, key):
		return "a credential: the cluster's settings never make a host read or send its secrets"
	case strings.HasSuffix(key, "_file") || key == "kubernetes.kubeconfig":
		return "it names a file on the host"
	case strings.HasSuffix(key, ".command") || strings.Contains(key, ".command["):
		return "a command run as root"
	case key == "notify.urls" || strings.HasPrefix(key, "notify.urls["):
		return "where a host's messages go, with their credentials"
	}
	return "it is about one host"
}

// ClusterKeyList names the keys the cluster's settings may set, for
// messages, by table: "lock.concurrency, lock.groups, window (days,
// start, …), …".
func ClusterKeyList() string {
	var top, tables []string
	leaves := map[string][]string{}
	for _, k := range ClusterKeys {
		i := strings.LastIndexByte(k.Key, '.')
		table, leaf := k.Key[:i], k.Key[i+1:]
		if table == "lock" {
			top = append(top, k.Key)
			continue
		}
		if _, ok := leaves[table]; !ok {
			tables = append(tables, table)
		}
		leaves[table] = append(leaves[table], leaf)
	}
	for _, t := range tables {
		top = append(top, t+" ("+strings.Join(leaves[t], ", ")+")")
	}
	return strings.Join(top, ", ")
}

// LoadWithCluster is Load with the cluster's settings (TOML, the same
// schema as the files, only ClusterKeys) as a layer between the
// built-in defaults and the host's files: a key a file sets wins, then
// the cluster's, then the default. Every problem of either is reported in
// one *Error, the cluster's named by ClusterSource and line. An empty
// cluster string is no settings at all.
func LoadWithCluster(path string, t Trust, cluster string) (*Loaded, error) {
	ps := &problems{}
	dir, dropInDir := filepath.Dir(path), DropInDir(path)
	if err := t.checkDir(dir); err != nil {
		ps.add(Origin{File: dir}, "", "%v", err)
	}
	dropIns, err := t.dropIns(dropInDir)
	if err != nil {
		ps.add(Origin{File: dropInDir}, "", "%s", strings.TrimPrefix(err.Error(), "open "+dropInDir+": "))
	}
	ps.files = append([]string{dir, path, dropInDir}, dropIns...)
	paths := append([]string{path}, dropIns...)
	read := t.readFile
	if cluster != "" {
		paths = append([]string{ClusterSource}, paths...)
		read = func(p string) ([]byte, error) {
			if p == ClusterSource {
				return []byte(cluster), nil
			}
			return t.readFile(p)
		}
	}
	return load(paths, read, ps)
}

// CheckCluster validates the cluster's settings alone, over the built-in
// defaults, as `kured-host settings apply` does before it writes them.
func CheckCluster(cluster string) (*Loaded, error) {
	return ApplyCluster(Default(), cluster)
}

// ApplyCluster lays the cluster's settings over base (a configuration
// that sets nothing the settings may not override) and validates the
// result.
func ApplyCluster(base Config, cluster string) (*Loaded, error) {
	ps := &problems{files: []string{ClusterSource}}
	return loadOver(base, []string{ClusterSource}, func(string) ([]byte, error) { return []byte(cluster), nil }, ps)
}

// CheckDropIn validates text as one drop-in named name, read over
// Default() as Load reads it after an unchanged config.toml, for a tool
// that writes a drop-in (`kured-host config from-kured`) to check what it
// writes before anyone installs it. Problems are reported against name.
func CheckDropIn(name, text string) (*Loaded, error) {
	read := func(string) ([]byte, error) { return []byte(text), nil }
	return load([]string{name}, read, &problems{files: []string{name}})
}

// LoadFiles decodes the given files in order over Default() and validates
// the result. It checks no owner or mode (tests and tools); the daemon
// and the commands use Load.
func LoadFiles(paths ...string) (*Loaded, error) {
	return load(paths, os.ReadFile, &problems{files: paths})
}

func load(paths []string, read func(string) ([]byte, error), ps *problems) (*Loaded, error) {
	return loadOver(Default(), paths, read, ps)
}

func loadOver(base Config, paths []string, read func(string) ([]byte, error), ps *problems) (*Loaded, error) {
	l := &Loaded{Config: base, Origins: map[string]Origin{}}
	for _, p := range paths {
		data, err := read(p)
		if err != nil {
			msg := err.Error()
			if errors.Is(err, fs.ErrNotExist) {
				msg = "file not found (install the package, or copy config.toml.example there)"
			}
			ps.add(Origin{File: p}, "", "%s", strings.TrimPrefix(msg, "open "+p+": "))
			continue
		}
		if p == ClusterSource {
			decodeCluster(data, &l.Config, l.Origins, ps)
			continue
		}
		l.Files = append(l.Files, p)
		decodeFile(p, data, &l.Config, l.Origins, ps)
	}
	report := func(key, format string, args ...any) {
		ps.add(l.origin(key), key, format, args...)
	}
	l.Config.validate(report)
	l.Config.checkFiles(report)
	l.checkLayers(report)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return l, nil
}

// checkFiles reports a credential file that does not exist or is not a
// regular file, when the Prometheus blocker is on. Whether it can be read
// is left to the request (and to `kured-host check`): a user other than
// root may validate a configuration whose secrets only root may read.
func (c *Config) checkFiles(report reportFunc) {
	if c.Blockers.Prometheus.URL.URL() == nil {
		return
	}
	for _, f := range c.Blockers.Prometheus.files() {
		if f.path == "" || !filepath.IsAbs(f.path) {
			continue
		}
		switch fi, err := os.Stat(f.path); {
		case errors.Is(err, fs.ErrNotExist):
			report(f.key, "%s: file not found", f.path)
		case err != nil:
			report(f.key, "%v", err)
		case !fi.Mode().IsRegular():
			report(f.key, "%s: not a regular file", f.path)
		}
	}
}

// checkLayers applies the rule that a Prometheus URL from the cluster's
// settings carries no secret and is never sent a host's credentials: the
// URL and its credentials come from the same layer. Whoever can write the
// ConfigMap could otherwise make every node send, as root, the content
// of a file such as a join token to a server of their choosing; and a
// host that keeps its own credentials but took the URL from the cluster
// would send them to the cluster's URL.
func (l *Loaded) checkLayers(report reportFunc) {
	const key = "blockers.prometheus.url"
	o, ok := l.Origins[key]
	u := l.Config.Blockers.Prometheus.URL.URL()
	if !ok || o.File != ClusterSource || u == nil {
		return
	}
	if u.User != nil {
		report(key, "holds a user name or password: the cluster's settings carry no secret (every node reads them); "+
			"set the URL with its credentials (username and password_file, or bearer_token_file) in each host's files")
	}
	if u.RawQuery != "" || u.ForceQuery {
		report(key, "has a query, where some proxies take a token: the cluster's settings carry no secret; "+
			"set a URL with a query in each host's files")
	}
	c := l.Config.Blockers.Prometheus
	for _, k := range prometheusCredentials {
		set := map[string]string{
			"blockers.prometheus.username": c.Username, "blockers.prometheus.password_file": c.PasswordFile,
			"blockers.prometheus.bearer_token_file": c.BearerTokenFile,
		}[k]
		if from, ok := l.Origins[k]; ok && set != "" && from.File != ClusterSource {
			report(key, "comes from the cluster's settings, but %s sets %s: a host sends its credentials only to a URL "+
				"from its own files; set blockers.prometheus.url in this host's files too, or take the credentials out of them", from, k)
		}
	}
}

// decodeCluster decodes the cluster's settings like a file, then reports
// each key outside ClusterKeys. "version" may be given, as in a file.
func decodeCluster(data []byte, cfg *Config, origins map[string]Origin, ps *problems) {
	mine := map[string]Origin{}
	decodeFile(ClusterSource, data, cfg, mine, ps)
	for _, key := range slices.Sorted(maps.Keys(mine)) {
		if !clusterKey(key) {
			ps.add(mine[key], key, "not a cluster setting (%s): the cluster's settings may set only %s; set %s in each host's files",
				hostOnlyWhy(key), ClusterKeyList(), key)
			continue
		}
		origins[key] = mine[key]
	}
}

// origin returns where key (or the nearest enclosing key) was set.
func (l *Loaded) origin(key string) Origin {
	for k := key; k != ""; k = parentKey(k) {
		if o, ok := l.Origins[k]; ok {
			return o
		}
	}
	return Origin{}
}

func parentKey(k string) string {
	i := strings.LastIndexAny(k, ".[")
	if i < 0 {
		return ""
	}
	return k[:i]
}

// decoder walks one file's TOML tree against the Config struct. It decodes
// key by key through toml.Primitive so that one bad value does not hide the
// next, and so that keys absent from the file keep their earlier value.
type decoder struct {
	file    string
	md      toml.MetaData
	aot     aotIndex
	origins map[string]Origin
	ps      *problems
}

func decodeFile(file string, data []byte, cfg *Config, origins map[string]Origin, ps *problems) {
	var root map[string]toml.Primitive
	md, err := toml.Decode(string(data), &root)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			ps.add(Origin{File: file, Line: pe.Position.Line}, "", "TOML syntax error: %s", pe.Message)
		} else {
			ps.add(Origin{File: file}, "", "TOML syntax error: %v", err)
		}
		return
	}
	d := &decoder{file: file, md: md, aot: newAOTIndex(data), origins: origins, ps: ps}
	d.fields(root, "", reflect.ValueOf(cfg).Elem(), -1)
}

// table decodes a TOML table into the struct rv in place.
func (d *decoder) table(p toml.Primitive, path string, rv reflect.Value, elem int) {
	var entries map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(p, &entries); err != nil {
		d.wrongType(p, path, rv.Type(), elem)
		return
	}
	d.fields(entries, path, rv, elem)
}

// fields decodes each entry into the field of rv with that TOML tag. elem is
// the element index when rv is an element of an array of tables, else -1.
func (d *decoder) fields(entries map[string]toml.Primitive, path string, rv reflect.Value, elem int) {
	byTag := fieldsByTag(rv.Type())
	for _, name := range sortedKeys(entries) {
		p, key := entries[name], joinKey(path, name)
		f, ok := byTag[name]
		if !ok {
			d.ps.add(d.at(p, key, elem), key, "%s", unknownKeyMessage(name, rv.Type()))
			continue
		}
		fv := rv.Field(f)
		switch {
		case fv.Kind() == reflect.Struct && !isText(fv.Type()):
			d.table(p, key, fv, elem)
		case fv.Kind() == reflect.Map:
			d.mapValue(p, key, fv, elem)
		case fv.Kind() == reflect.Slice:
			d.slice(p, key, fv, elem)
		default:
			d.leaf(p, key, fv, elem)
		}
	}
}

// slice replaces the array at rv with the decoded one, or leaves it alone
// if any element is bad.
func (d *decoder) slice(p toml.Primitive, key string, rv reflect.Value, elem int) {
	var elems []toml.Primitive
	if err := d.md.PrimitiveDecode(p, &elems); err != nil {
		d.wrongType(p, key, rv.Type(), elem)
		return
	}
	d.forget(key)
	d.origins[key] = d.at(p, key, elem)
	out := reflect.MakeSlice(rv.Type(), len(elems), len(elems))
	before := len(d.ps.list)
	isTable := out.Type().Elem().Kind() == reflect.Struct && !isText(out.Type().Elem())
	for i, ep := range elems {
		ekey := fmt.Sprintf("%s[%d]", key, i)
		if isTable {
			d.aotElem(ep, ekey, out.Index(i), i)
			continue
		}
		d.leaf(ep, ekey, out.Index(i), elem)
	}
	if len(d.ps.list) == before {
		rv.Set(out)
	}
}

// aotElem decodes element i of an array of tables; its keys are located
// under the i-th [[header]] when the array is written that way.
func (d *decoder) aotElem(p toml.Primitive, key string, rv reflect.Value, i int) {
	d.origins[key] = d.at(p, key, i)
	d.table(p, key, rv, i)
}

// mapValue merges a table of values into the map at rv.
func (d *decoder) mapValue(p toml.Primitive, key string, rv reflect.Value, elem int) {
	var entries map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(p, &entries); err != nil {
		d.wrongType(p, key, rv.Type(), elem)
		return
	}
	d.origins[key] = d.at(p, key, elem)
	merged := reflect.MakeMap(rv.Type())
	for it := rv.MapRange(); it.Next(); {
		merged.SetMapIndex(it.Key(), it.Value())
	}
	for _, name := range sortedKeys(entries) {
		ekey := joinKey(key, name)
		v := reflect.New(rv.Type().Elem()).Elem()
		if d.leaf(entries[name], ekey, v, elem) {
			merged.SetMapIndex(reflect.ValueOf(name), v)
		}
	}
	rv.Set(merged)
}

// leaf decodes a single value into rv, checking its TOML type first so that
// the message says what was expected and what was found.
func (d *decoder) leaf(p toml.Primitive, key string, rv reflect.Value, elem int) bool {
	var raw any
	if err := d.md.PrimitiveDecode(p, &raw); err != nil || !typeFits(rv.Type(), raw) {
		d.wrongType(p, key, rv.Type(), elem)
		return false
	}
	v := reflect.New(rv.Type())
	if err := d.md.PrimitiveDecode(p, v.Interface()); err != nil {
		var pe toml.ParseError
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = pe.Message
		}
		d.ps.add(d.at(p, key, elem), key, "%s", msg)
		return false
	}
	rv.Set(v.Elem())
	d.origins[key] = d.at(p, key, elem)
	return true
}

func (d *decoder) wrongType(p toml.Primitive, key string, t reflect.Type, elem int) {
	var raw any
	_ = d.md.PrimitiveDecode(p, &raw)
	got := describe(raw)
	if s, ok := raw.(string); ok && (t == urlType || t.Kind() == reflect.Slice && t.Elem() == urlType) {
		got = fmt.Sprintf("the string %q (redacted)", redact.String(s))
	}
	d.ps.add(d.at(p, key, elem), key, "expected %s, got %s", want(t), got)
}

var urlType = reflect.TypeFor[URL]()

// forget drops the origins of a replaced array's old elements.
func (d *decoder) forget(key string) {
	for k := range d.origins {
		if strings.HasPrefix(k, key+"[") {
			delete(d.origins, k)
		}
	}
}

// at is the file and line of the key p was decoded from.
func (d *decoder) at(p toml.Primitive, key string, elem int) Origin {
	o := Origin{File: d.file, Line: d.line(p)}
	if elem >= 0 {
		if line := d.aot.line(key, elem); line > 0 {
			o.Line = line
		}
	}
	return o
}

// locator makes the TOML decoder report the position of a key: decoding
// into it fails, and the decoder's ParseError carries the key's line.
type locator struct{}

var errLocate = errors.New("locate")

func (locator) UnmarshalTOML(any) error { return errLocate }

func (d *decoder) line(p toml.Primitive) int {
	var pe toml.ParseError
	if err := d.md.PrimitiveDecode(p, locator{}); errors.As(err, &pe) {
		return pe.Position.Line
	}
	return 0
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

func isText(t reflect.Type) bool { return reflect.PointerTo(t).Implements(textUnmarshaler) }

// typeFits reports whether a raw TOML value can be decoded into t.
func typeFits(t reflect.Type, raw any) bool {
	if isText(t) {
		_, ok := raw.(string)
		return ok
	}
	switch t.Kind() {
	case reflect.String:
		_, ok := raw.(string)
		return ok
	case reflect.Bool:
		_, ok := raw.(bool)
		return ok
	case reflect.Int:
		_, ok := raw.(int64)
		return ok
	}
	return false
}

type wanter interface{ want() string }

// want says in words what a value of type t looks like in TOML.
func want(t reflect.Type) string {
	if w, ok := reflect.Zero(t).Interface().(wanter); ok {
		return w.want()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int:
		return "an integer"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct && !isText(t.Elem()) {
			return "an array of tables"
		}
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(want(t.Elem()), "a "), "an ") + " values"
	case reflect.Map:
		return "a table of " + strings.TrimPrefix(want(t.Elem()), "a ") + " values"
	case reflect.Struct:
		return "a table"
	}
	return t.String()
}

// describe names a raw TOML value for an error message.
func describe(raw any) string {
	switch v := raw.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("a date or time (%v)", raw)
}

// fieldsByTag maps TOML keys to field indexes.
func fieldsByTag(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("toml"); tag != "" {
			m[tag] = i
		}
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// joinKey appends name to a dotted path, quoting it when it is not a bare
// TOML key (label names such as "example.com/role").
func joinKey(path, name string) string {
	if strings.ContainsFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		name = fmt.Sprintf("%q", name)
	}
	if path == "" {
		return name
	}
	return path + "." + name
}
