package fromkured

import (
	"encoding/csv"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/printable"
	"github.com/kured-host/kured-host/daemon/redact"
)

// kind is how kured's flag library (spf13/pflag) reads a flag's value.
type kind int

const (
	kString   kind = iota
	kBool          // "--flag" alone is true; "--flag false" is true and a stray "false"
	kInt           // strconv.ParseInt with base 0, as pflag
	kDuration      // time.ParseDuration
	kRegexp        // compiled when given
	kSlice         // StringSlice: comma-separated; the first use replaces the default, later ones append
	kArray         // StringArray: one value per use, appended; kured reads no KURED_ variable for it
)

// value is one of kured's flags as kured ends up with it: its default,
// then the arguments in order (the last use of a scalar wins), then the
// KURED_ environment variable, which kured reads after its arguments.
type value struct {
	flag  string
	def   flagDef
	given bool
	text  string   // scalars: the value kured uses
	list  []string // kSlice and kArray
	// shown is each use as a comment names it ("--period=2h",
	// "KURED_PERIOD=2h"), secrets hidden.
	shown []string
	// err: kured refuses the value (it would not start with it).
	err error
	// unread: the value comes from where this tool cannot look (a
	// Secret, a field of the pod), and says from where.
	unread string
	// appended: a kSlice has been given, so that the next use appends.
	appended bool
	uses     int
	// notes on how the value was read, for the comment.
	notes []string
}

// cmdline is kured's whole command line, read as kured reads it.
type cmdline struct {
	values  map[string]*value // every flag of the table, given or not
	unknown []string          // uses of flags kured does not have, as shown
	extra   []string          // arguments that are not flags: kured ignores them
	// warnings about what kured ignores, for the operator's terminal.
	warnings []string
	// err is the first value that holds a character that does not
	// print (an UnprintableError): the conversion stops there.
	err error
}

func newCmdline() *cmdline {
	cl := &cmdline{values: map[string]*value{}}
	for name, d := range flagTable {
		v := &value{flag: name, def: d, text: d.def}
		if d.kind == kSlice || d.kind == kArray {
			v.text, v.list = "", splitCSV(d.def)
		}
		cl.values[name] = v
	}
	return cl
}

// parseArgs reads kured's arguments. pflag's forms are accepted
// ("--flag=value", "--flag value", "--flag" for a boolean), and a single
// dash as well ("-flag"): other tools' flag packages take it, and what it
// meant is plain.
func (cl *cmdline) parseArgs(args []string, ex *expander) {
	for i := 0; i < len(args) && cl.err == nil; i++ {
		switch a := args[i]; {
		case a == "--":
			cl.addExtra(args[i+1:], i+2)
			return
		case len(a) < 2 || a[0] != '-':
			cl.addExtra(args[i:i+1], i+1)
		default:
			i = cl.parseFlag(args, i, ex)
		}
	}
}

// addExtra keeps arguments kured ignores, from its argument n on: they are shown, so must print.
func (cl *cmdline) addExtra(args []string, n int) {
	for j, e := range args {
		if cl.check(fmt.Sprintf("kured's argument %d", n+j), e, redact.Text(e), "") {
			return
		}
	}
	cl.extra = append(cl.extra, args...)
}

// flagUse is one flag on kured's command line and the value it was given.
type flagUse struct {
	flag     string // "--name", whatever the dashes written
	d        flagDef
	known    bool
	raw      string
	hasValue bool
}

// parseFlag reads the flag at args[i] and its value, and returns the index of the last argument read.
func (cl *cmdline) parseFlag(args []string, i int, ex *expander) int {
	a := args[i]
	where := fmt.Sprintf("kured's argument %d", i+1)
	name, raw, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
	u := flagUse{flag: "--" + name, raw: raw, hasValue: hasValue}
	u.d, u.known = flagTable[u.flag]
	if cl.check(where, a, showArg(u.flag, u.known, a), u.d.spacing()) {
		return i
	}
	i, ok := cl.takeValue(&u, args, i)
	switch {
	case !ok:
	case !u.known:
		cl.unknown = append(cl.unknown, showUse(u.flag, u.raw, u.hasValue))
	default:
		cl.apply(u, where, ex)
	}
	return i
}

// takeValue finds a flag's value as pflag would; ok is false if there is none to apply.
func (cl *cmdline) takeValue(u *flagUse, args []string, i int) (last int, ok bool) {
	switch {
	case u.hasValue:
	case !u.known:
		// pflag would refuse it, so there is no telling whether it took
		// a value: a next word that is not a flag is read as its value.
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			return i + 1, cl.valueFrom(u, args, i+1)
		}
	case u.d.kind == kBool:
		u.raw = "true"
	case i+1 < len(args):
		// pflag takes the next word whatever it is ("--drain-grace-period -1").
		return i + 1, cl.valueFrom(u, args, i+1)
	default:
		v := cl.values[u.flag]
		v.given, v.err = true, fmt.Errorf("flag needs an argument")
		v.shown = append(v.shown, u.flag)
		return i, false
	}
	return i, true
}

// valueFrom takes args[i] as the flag's value, and says whether it prints.
func (cl *cmdline) valueFrom(u *flagUse, args []string, i int) bool {
	u.raw, u.hasValue = args[i], true
	shown := strings.TrimPrefix(showArg(u.flag, u.known, u.flag+"="+u.raw), u.flag+"=")
	return !cl.check(fmt.Sprintf("kured's argument %d, the value of %s", i+1, u.flag), u.raw, shown, u.d.spacing())
}

// apply gives a flag its value with $(NAME) expanded, or marks it unread if that cannot be known here.
func (cl *cmdline) apply(u flagUse, where string, ex *expander) {
	v := cl.values[u.flag]
	expanded, unread := ex.expand(u.raw)
	if use := showUse(u.flag, expanded, u.hasValue); expanded != u.raw &&
		cl.check(where+" once its $(NAME) references are expanded", use, hideSecret(u.flag, use), u.d.spacing()) {
		return
	}
	if unread != "" {
		v.given, v.unread = true, unread
		v.shown = append(v.shown, hideSecret(u.flag, showUse(u.flag, u.raw, u.hasValue)))
		return
	}
	cl.set(v, u.d, expanded, hideSecret(u.flag, showUse(u.flag, expanded, u.hasValue)), false)
}

func showUse(flag, raw string, hasValue bool) string {
	if !hasValue {
		return flag
	}
	return flag + "=" + raw
}

// envName is the variable kured reads for flag: KURED_ and the flag's
// name in capitals with underscores.
func envName(flag string) string {
	return "KURED_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(flag, "--"), "-", "_"))
}

// parseEnv reads the container's KURED_ variables after the arguments,
// as kured does: a variable wins over the argument.
func (cl *cmdline) parseEnv(env []corev1.EnvVar, ex *expander) {
	byEnv := map[string]string{}
	for name := range flagTable {
		byEnv[envName(name)] = name
	}
	for _, e := range env {
		if !strings.HasPrefix(e.Name, "KURED_") {
			continue
		}
		flag, known := byEnv[e.Name]
		if cl.checkEnv(e, flag, ex) {
			return
		}
		if !known {
			cl.unknown = append(cl.unknown, e.Name)
			continue
		}
		v, d := cl.values[flag], flagTable[flag]
		if e.ValueFrom != nil {
			v.given, v.unread = true, describeSource(e.ValueFrom)
			v.shown = append(v.shown, fmt.Sprintf("%s (from %s)", e.Name, v.unread))
			continue
		}
		expanded, unread := ex.expand(e.Value)
		shown := hideSecret(flag, e.Name+"="+expanded)
		switch {
		case unread != "":
			v.given, v.unread = true, unread
			v.shown = append(v.shown, e.Name)
		case d.kind == kArray:
			why := fmt.Sprintf("kured does not read %s (it says \"Unsupported flag type\"): left out", e.Name)
			v.given = true
			v.shown = append(v.shown, shown)
			v.notes = append(v.notes, why)
			cl.warnings = append(cl.warnings, shown+": "+why)
		default:
			cl.set(v, d, expanded, shown, true)
		}
	}
}

// check records an UnprintableError for value, if it holds a character
// that does not print (besides those in allowed), and says whether it did.
func (cl *cmdline) check(where, value, shown, allowed string) bool {
	if cl.err == nil {
		cl.err = checkText(where, value, shown, allowed)
	}
	return cl.err != nil
}

// checkEnv checks a KURED_ variable: its name, its value and the value
// once expanded.
func (cl *cmdline) checkEnv(e corev1.EnvVar, flag string, ex *expander) bool {
	where := "variable " + printable.String(e.Name)
	allowed := flagTable[flag].spacing()
	if cl.check("the name of a variable", e.Name, e.Name, "") {
		return true
	}
	if e.ValueFrom != nil {
		return false // not read: see parseEnv
	}
	use := e.Name + "=" + e.Value
	if cl.check(where, use, showArg(flag, flag != "", use), allowed) {
		return true
	}
	expanded, _ := ex.expand(e.Value)
	use = e.Name + "=" + expanded
	return expanded != e.Value && cl.check(where+" once its $(NAME) references are expanded", use, showArg(flag, flag != "", use), allowed)
}

// showArg is an argument as an error shows it: a secret flag's value
// hidden; a flag kured does not have may be a misspelt secret one, so
// any URL in it is hidden.
func showArg(flag string, known bool, arg string) string {
	if !known {
		return redact.Text(arg)
	}
	return hideSecret(flag, arg)
}

// set gives flag v the value raw, as pflag's Set would.
func (cl *cmdline) set(v *value, d flagDef, raw, shown string, fromEnv bool) {
	v.given = true
	v.uses++
	v.shown = append(v.shown, shown)
	if d.kind != kSlice && d.kind != kArray {
		v.unread = "" // a later value replaces one that could not be read
	}
	if err := setters[d.kind](v, raw, fromEnv); err != nil && v.err == nil {
		v.err = err
	}
}

// setters set a value of each kind as pflag's Set does; a refused value leaves the flag as it was.
var setters = map[kind]func(v *value, raw string, fromEnv bool) error{
	kString:   setString,
	kBool:     setBool,
	kInt:      setInt,
	kDuration: setChecked(func(s string) error { _, err := time.ParseDuration(s); return err }),
	kRegexp:   setChecked(func(s string) error { _, err := regexp.Compile(s); return err }),
	kSlice:    setSlice,
	kArray:    setArray,
}

// setString keeps the value as written, but a pair of quotes alone is read as empty.
func setString(v *value, raw string, _ bool) error {
	if raw == `""` || raw == "''" {
		// A DaemonSet's arguments pass no shell: the quotes were meant
		// as an empty value, and kured got them as two characters.
		v.notes = append(v.notes, "its quotes are not shell quoting in a DaemonSet: kured got them as the value; read as empty")
		raw = ""
	}
	v.text = raw
	return nil
}

// setBool takes what strconv.ParseBool takes, as pflag does, and keeps it as "true" or "false".
func setBool(v *value, raw string, _ bool) error {
	b, err := strconv.ParseBool(raw)
	if err != nil {
		return err
	}
	v.text = strconv.FormatBool(b)
	return nil
}

// setInt reads an argument as pflag (base 0: "0x10" is 16), a KURED_ variable as kured (strconv.Atoi).
func setInt(v *value, raw string, fromEnv bool) error {
	var n int64
	var err error
	if fromEnv {
		var i int
		i, err = strconv.Atoi(raw)
		n = int64(i)
	} else {
		n, err = strconv.ParseInt(raw, 0, 64)
	}
	if err != nil {
		return err
	}
	v.text = strconv.FormatInt(n, 10)
	return nil
}

// setChecked keeps the value as written once check accepts it: kured parses it again itself.
func setChecked(check func(string) error) func(*value, string, bool) error {
	return func(v *value, raw string, _ bool) error {
		if err := check(raw); err != nil {
			return err
		}
		v.text = raw
		return nil
	}
}

// setSlice: the first use replaces the default, later ones append.
func setSlice(v *value, raw string, _ bool) error {
	items := splitCSV(raw)
	if v.appended {
		v.list = append(v.list, items...)
	} else {
		v.list, v.appended = items, true
	}
	return nil
}

// setArray: each use is one element, commas and all.
func setArray(v *value, raw string, _ bool) error {
	v.list = append(v.list, raw)
	return nil
}

// splitCSV splits a StringSlice value as pflag does: comma-separated, with
// CSV quoting; empty is no element.
func splitCSV(s string) []string {
	if s == "" {
		return []string{}
	}
	r := csv.NewReader(strings.NewReader(s))
	r.FieldsPerRecord = -1
	rec, err := r.Read()
	if err != nil {
		// pflag refuses it; the value as one element shows what was meant.
		return []string{s}
	}
	return rec
}

// describeSource says where an environment variable's value comes from.
func describeSource(s *corev1.EnvVarSource) string {
	switch {
	case s.SecretKeyRef != nil:
		return fmt.Sprintf("Secret %s, key %s", s.SecretKeyRef.Name, s.SecretKeyRef.Key)
	case s.ConfigMapKeyRef != nil:
		return fmt.Sprintf("ConfigMap %s, key %s", s.ConfigMapKeyRef.Name, s.ConfigMapKeyRef.Key)
	case s.FieldRef != nil:
		return "the pod's " + s.FieldRef.FieldPath
	case s.ResourceFieldRef != nil:
		return "the container's " + s.ResourceFieldRef.Resource
	}
	return "a source outside the DaemonSet"
}

// expander expands $(NAME) in arguments and variables as the kubelet
// does, with the container's variables that have a value in the
// DaemonSet itself. A reference to a variable that does not exist stays
// as written, as the kubelet leaves it; one to a variable set from a
// Secret or a field cannot be known here.
type expander struct {
	values map[string]string // variables with a value
	unread map[string]string // variables set from elsewhere: from where
}

func newExpander(env []corev1.EnvVar) *expander {
	ex := &expander{values: map[string]string{}, unread: map[string]string{}}
	for _, e := range env {
		if e.ValueFrom != nil {
			ex.unread[e.Name] = describeSource(e.ValueFrom)
			delete(ex.values, e.Name)
			continue
		}
		// A variable may refer to those before it.
		v, _ := ex.expand(e.Value)
		ex.values[e.Name] = v
		delete(ex.unread, e.Name)
	}
	return ex
}

var reference = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand returns s expanded, or why it cannot be: "$(NAME), from …".
func (ex *expander) expand(s string) (string, string) {
	if ex == nil {
		return s, ""
	}
	unread := ""
	out := reference.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		name := m[2 : len(m)-1]
		if v, ok := ex.values[name]; ok {
			return v
		}
		if from, ok := ex.unread[name]; ok && unread == "" {
			unread = fmt.Sprintf("$(%s), from %s", name, from)
		}
		return m
	})
	return out, unread
}
