package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/logging"
	"github.com/kured-host/kured-host/daemon/printable"
	"github.com/kured-host/kured-host/daemon/version"
	"github.com/kured-host/kured-host/packaging"
)

// Exit statuses, documented in the README and in `kured-host help`.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure
	exitUsage   = 2 // bad configuration or usage
)

// configTrust is the rule for who may write the configuration: as root,
// root alone (config.TrustFor). Tests replace it to act as root.
var configTrust = func() config.Trust { return config.TrustFor(os.Geteuid()) }

// usageError is a mistake on the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run the daemon (systemd starts it: systemctl enable --now kured-host)", runDaemon},
		{"stopped", "mark this node's waiting claim when the daemon stops (systemd runs it)", runStopped},
		{"check", "validate the configuration, then check the host and the cluster for what run needs", runCheck},
		{"status", "show who holds a reboot slot, who waits and why", runStatus},
		{"pause", "pause reboots for the whole cluster (an admin's kubeconfig)", runPause},
		{"resume", "lift the cluster's pause", runResume},
		{"hold", "keep nodes out of the reboots (an admin's kubeconfig)", runHold},
		{"unhold", "lift nodes' hold", runUnhold},
		{"settings", "show the cluster's settings; settings apply -f FILE writes them", runSettings},
		{"config", "config from-kured: write a drop-in from kured's DaemonSet or flags", runConfig},
		{"rbac", "print the RBAC the nodes need: read Nodes (clusters >= 1.32), read the cluster's pause", runRBAC},
		{"version", "print the version, commit and Go version", runVersion},
		{"help", "show help for a command", nil},
	}
}

const overview = `kured-host: coordinated reboots of Kubernetes nodes, from the host.

Usage: kured-host <command> [flags]

Commands:
%s
Run "kured-host <command> --help" for a command's flags.

Configuration: %s, then %s/*.toml in lexical order.
Exit status: 0 ok, 1 runtime failure, 2 bad configuration or usage.
`

func usage() string {
	var b strings.Builder
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-8s  %s\n", c.name, c.summary)
	}
	return fmt.Sprintf(overview, b.String(), config.DefaultPath, config.DropInDir(config.DefaultPath))
}

// run dispatches to the subcommand named by args[0].
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{"no command given\n\n" + usage()}
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			_, err := io.WriteString(stdout, usage())
			return err
		}
		name, rest = rest[0], []string{"--help"}
	}
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			return c.run(ctx, rest, stdout, stderr)
		}
	}
	return &usageError{fmt.Sprintf("unknown command %q\n\n%s", name, usage())}
}

// flags is a subcommand's flag set. Its usage text goes to stdout on
// --help and parse errors become usage errors.
type flags struct {
	*flag.FlagSet
	synopsis, about string
}

func newFlags(name, synopsis, about string) *flags {
	fs := flag.NewFlagSet("kured-host "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &flags{FlagSet: fs, synopsis: synopsis, about: about}
}

// parse returns done=true when --help was handled.
func (f *flags) parse(args []string, stdout io.Writer) (done bool, err error) {
	err = f.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "Usage: %s %s\n\n%s\n", f.Name(), f.synopsis, f.about)
		f.SetOutput(stdout)
		if hasFlags(f.FlagSet) {
			fmt.Fprintln(stdout, "\nFlags:")
			f.PrintDefaults()
		}
		return true, nil
	case err != nil:
		return true, &usageError{fmt.Sprintf("%s: %v (see %s --help)", f.Name(), err, f.Name())}
	case f.NArg() > 0:
		return true, &usageError{fmt.Sprintf("%s: unexpected argument %q (see %s --help)", f.Name(), f.Arg(0), f.Name())}
	}
	return false, nil
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("run", "[--config FILE] [--host-root DIR]",
		"Runs the daemon in the foreground until SIGTERM. systemd starts it as\n"+
			"kured-host.service; a bad configuration stops it with exit status 2.")
	path, root := f.host("(sentinel, boot ID, kubelet kubeconfig), for running in a container or in tests")
	if done, err := f.parse(args, stdout); done {
		return err
	}
	l, err := config.Load(*path, configTrust())
	if err != nil {
		return err
	}
	log, err := daemonLog(stderr, l.Config)
	if err != nil {
		return err
	}
	log.Info("starting", "version", version.Version, "config", strings.Join(l.Files, ","))
	for _, w := range l.Config.Warnings() {
		log.Warn("configuration: " + w)
	}
	d, err := daemon.Assemble(ctx, daemon.Setup{
		Config: l.Config, Root: host.Root(*root), Log: log, Manager: host.Systemd{},
		Reload: func(cluster string) (config.Config, error) {
			l, err := config.LoadWithCluster(*path, configTrust(), cluster)
			if err != nil {
				return config.Config{}, err
			}
			return l.Config, nil
		},
		UserAgent: "kured-host/" + version.Version,
	})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// stoppedTimeout bounds `kured-host stopped`: it runs while systemd stops
// the unit, at shutdown too, and must not hold either up.
const stoppedTimeout = 10 * time.Second

// host adds the flags that say where the configuration and the host's
// files are; where is the end of the latter's usage.
func (f *flags) host(where string) (path, root *string) {
	path = f.String("config", config.DefaultPath, "configuration `file`; drop-ins are read from config.d next to it")
	root = f.String("host-root", "/", "`directory` under which the host's files are "+where)
	return path, root
}

// daemonLog is the daemon's logger as the configuration sets it, in the
// journal's format when stderr is the journal.
func daemonLog(stderr io.Writer, c config.Config) (*slog.Logger, error) {
	return logging.New(stderr, logging.Options{Format: c.Log.Format, Level: c.Log.Level, Journal: logging.StderrIsJournal()})
}

func runStopped(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("stopped", "[--config FILE] [--host-root DIR]",
		"Marks this node's waiting claim (the label kured-host.dev/stopped) so that\n"+
			"the nodes behind it in the queue go past it at once, rather than at their\n"+
			"next resync. systemd runs it when kured-host.service stops (ExecStopPost=);\n"+
			"the daemon takes the mark off when it waits again. A node that holds a\n"+
			"slot keeps it. A configuration that does not load (the reason the daemon\n"+
			"stopped, maybe) is replaced by the defaults: the kubeconfig is found as\n"+
			"the daemon finds it.")
	path, root := f.host("as for run")
	if done, err := f.parse(args, stdout); done {
		return err
	}
	cfg := config.Default()
	l, loadErr := config.Load(*path, configTrust())
	if loadErr == nil {
		cfg = l.Config
	}
	log, err := daemonLog(stderr, cfg)
	if err != nil {
		return err
	}
	if loadErr != nil {
		log.Warn("the configuration does not load; finding the kubeconfig with the defaults", "err", loadErr)
	}
	ctx, cancel := context.WithTimeout(ctx, stoppedTimeout)
	defer cancel()
	marked, err := daemon.MarkStopped(ctx, daemon.Setup{
		Config: cfg, Root: host.Root(*root), Log: log, UserAgent: "kured-host/" + version.Version,
	})
	if err != nil {
		return err
	}
	if marked {
		log.Info("the daemon has stopped with the node waiting for a slot: marked, so that the nodes behind it go past it until it is back")
	}
	return nil
}

func runRBAC(_ context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("rbac", "",
		"Prints the ClusterRole and ClusterRoleBinding that let the group\n"+
			"system:nodes get, list and watch Nodes, which kured-host needs on\n"+
			"Kubernetes 1.32 and later, and the Role and RoleBinding that let it\n"+
			"get and watch the one ConfigMap kube-system/kured-host, where an\n"+
			"operator pauses the cluster. Apply it once per cluster:\n\n"+
			"  kured-host rbac | kubectl apply -f -\n\n"+
			"The packages install the same file as /usr/share/kured-host/rbac.yaml.")
	if done, err := f.parse(args, stdout); done {
		return err
	}
	_, err := stdout.Write(packaging.RBAC)
	return err
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("version", "", "Prints the version, the commit and the Go version of this build.")
	if done, err := f.parse(args, stdout); done {
		return err
	}
	_, err := io.WriteString(stdout, version.String())
	return err
}

// report prints err for the user and returns the exit status. Under
// systemd each line is marked as an error for the journal.
func report(err error, stderr io.Writer) int {
	code := exitFailure
	var uerr *usageError
	var cerr *config.Error
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return exitOK
	case errors.As(err, &uerr), errors.As(err, &cerr):
		code = exitUsage
	}
	prefix := ""
	if stderr == io.Writer(os.Stderr) && logging.StderrIsJournal() {
		prefix = "<3>"
	}
	// An error may quote the cluster (an API server's message, another
	// node's claim, the settings): each line is made printable.
	for _, line := range strings.Split(strings.TrimRight("kured-host: "+err.Error(), "\n"), "\n") {
		fmt.Fprintln(stderr, prefix+printable.String(line))
	}
	return code
}
