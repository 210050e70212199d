// Package fromkured turns kured's command line into a kured-host drop-in
// (`kured-host config from-kured`): kured's arguments, and the KURED_
// variables of its container, read as kured 1.x reads them, then
// converted flag by flag to the keys config.KuredOptions names, with a
// comment for each flag that has no counterpart or changes meaning. The
// drop-in is checked with the configuration loader's own rules
// (config.CheckDropIn): a value that does not load is left out, with the
// loader's reason in its comment.
package fromkured

import (
	"errors"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/redact"
)

// kuredVersion is the kured whose flags and defaults the table follows.
const kuredVersion = "1.23"

// ErrInput is input that holds no kured to convert: not a DaemonSet, or
// no kured container in it.
var ErrInput = errors.New("not kured's DaemonSet")

// Source is kured's command line and what of its DaemonSet bears on it.
type Source struct {
	// Name says where the command line came from, for the header.
	Name string
	// Args are kured's arguments, without the program's name.
	Args []string
	// Env is kured's container's environment: kured reads KURED_<FLAG>
	// after its arguments, and $(NAME) in an argument is expanded from it.
	Env []corev1.EnvVar
	// InPod: kured ran in a pod of the DaemonSet, so its paths are its
	// container's (Mounts maps them to the host's) and it served metrics
	// in the pod's network unless HostNetwork.
	InPod       bool
	Mounts      []Mount
	HostNetwork bool
	// Notes are what the DaemonSet says that this tool does not follow
	// (envFrom, a command that is not kured), for comments and warnings:
	// "what: why".
	Notes []string
}

// Mount is one of kured's volume mounts.
type Mount struct {
	Path   string // in the container
	Volume string
	// HostPath is the host's directory or file; empty when the volume is
	// not a hostPath.
	HostPath string
}

// FromArgs is a Source of kured's flags alone, as given on a command line.
func FromArgs(args []string) Source {
	return Source{Name: "the flags given after --", Args: args}
}

// hostPath maps a path that kured saw to the host's, through the
// hostPath volume mounted there, and says how ("through hostPath volume
// \"sentinel\""). Outside a pod a path is the host's as it is.
func (s Source) hostPath(p string) (host, via string, err error) {
	if !s.InPod {
		return p, "", nil
	}
	var best *Mount
	for i, m := range s.Mounts {
		mp := path.Clean(m.Path)
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && (best == nil || len(mp) > len(path.Clean(best.Path))) {
			best = &s.Mounts[i]
		}
	}
	switch {
	case best == nil:
		return "", "", errors.New("it is a path in kured's container, on no volume, so the host's path cannot be told")
	case best.HostPath == "":
		return "", "", fmt.Errorf("it is on volume %q, which is not a hostPath, so the host's path cannot be told", best.Volume)
	}
	rel := strings.TrimPrefix(p, path.Clean(best.Path))
	return path.Join(best.HostPath, rel), fmt.Sprintf("through hostPath volume %q", best.Volume), nil
}

// literalEnv is the value the DaemonSet gives the variable name itself
// (not from a Secret or a field).
func (s Source) literalEnv(name string) (string, bool) {
	val, ok := "", false
	for _, e := range s.Env {
		if e.Name == name {
			val, ok = e.Value, e.ValueFrom == nil
		}
	}
	return val, ok
}

// Result is a converted command line.
type Result struct {
	// DropIn is the TOML text: it loads with the strict loader.
	DropIn []byte
	// Warnings are for the operator's terminal: unknown flags, values
	// left out, values not read. They show no secret.
	Warnings []string
	// Secrets: the drop-in holds notify or Prometheus URLs, which may
	// carry credentials.
	Secrets bool
}

// Convert reads kured's command line from src and writes the drop-in.
func Convert(src Source) (*Result, error) {
	c, err := newConv(src)
	if err != nil {
		return nil, err
	}
	ex := newExpander(src.Env)
	c.cl.parseArgs(src.Args, ex)
	c.cl.parseEnv(src.Env, ex)
	if c.cl.err != nil {
		return nil, c.cl.err
	}
	c.warnings = append(c.warnings, c.cl.warnings...)
	for _, o := range config.KuredOptions {
		d, v := flagTable[o.Flag], c.cl.values[o.Flag]
		if v.given || d.always {
			c.convert(v, d)
		}
	}
	c.rest()
	if err := c.settle(); err != nil {
		return nil, err
	}
	return &Result{DropIn: []byte(c.text), Warnings: c.warnings, Secrets: c.sets(secretKey)}, nil
}

// convert writes one flag's entry: a value kured refuses, or one that
// cannot be read here, is a comment; the rest is the flag's converter's.
func (c *conv) convert(v *value, d flagDef) {
	key := optionKey(v.flag)
	switch {
	case v.err != nil:
		c.refuse(v, tableOf(key), fmt.Sprintf("kured refuses this value (%v) and would not start", v.err))
	case v.unread != "" && key != "" && !d.commentOnly:
		c.refuse(v, tableOf(key), fmt.Sprintf("its value comes from %s, which is not read here: set %s by hand", v.unread, key))
	default:
		d.conv(c, v)
	}
}

// rest writes the comments for what is not one of kured's flags.
func (c *conv) rest() {
	for _, u := range c.cl.unknown {
		u = redact.Text(u) // a misspelt --notify-url's value is a secret all the same
		why := fmt.Sprintf("not a flag of kured %s (kured would not start with it); not converted", kuredVersion)
		if strings.HasPrefix(u, "KURED_") {
			why = fmt.Sprintf("kured %s reads no such variable; not converted", kuredVersion)
		}
		c.add(&entry{order: len(config.KuredOptions), shown: u, notes: []string{why}})
		c.warn("%s: %s", u, why)
	}
	for _, a := range c.cl.extra {
		e := &entry{order: len(config.KuredOptions) + 1, shown: fmt.Sprintf("argument %q", redact.Text(a)), notes: []string{"not a flag: kured ignores it"}}
		c.add(e)
		c.warn("%s: %s", e.shown, e.notes[0])
	}
	for _, n := range c.src.Notes {
		shown, note, _ := strings.Cut(n, ": ")
		c.add(&entry{order: len(config.KuredOptions) + 2, shown: shown, notes: []string{note}})
		c.warn("%s", n)
	}
}
