package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/status"
	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/daemon/version"
)

const statusAbout = `Shows who holds a reboot slot, who waits and why, from one consistent
List of the cluster's Nodes: a table of the nodes that take part, in queue
order, a summary line, the limits in force and where they come from, and
what needs an operator (claims that cannot be read, claims past their alarm
age, nodes without a group label). The output is described in
docs/status.md; -o json is a stable, versioned schema for scripts.

On a node it uses the kubelet's kubeconfig, found as "run" finds it; anywhere
else give an admin's kubeconfig with --kubeconfig. A missing configuration
file is not an error: the limits are then what the claims publish.

Exit status: 0 ok, 1 the API server could not be read (the message says
which permission is missing), 2 bad usage or configuration.`

func runStatus(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("status", "[--kubeconfig FILE | --host-root DIR] [--config FILE] [-o table|json] [--watch [--interval 2s]]", statusAbout)
	path := f.String("config", config.DefaultPath, "configuration `file` (its lock limits and alarm ages); the built-in defaults if it does not exist")
	root := f.String("host-root", "/", "`directory` under which to find the kubelet's kubeconfig, as run does")
	kubeconfig := f.String("kubeconfig", "", "kubeconfig `file` to use instead of the kubelet's (an admin's, off the nodes)")
	var output string
	f.StringVar(&output, "o", "table", "output `format`: table or json")
	f.StringVar(&output, "output", "table", "output `format`, same as -o")
	watch := f.Bool("watch", false, "refresh every --interval, or sooner when a Node changes, until interrupted")
	interval := f.Duration("interval", 2*time.Second, "refresh `period` for --watch")
	if done, err := f.parse(args, stdout); done {
		return err
	}
	if output != "table" && output != "json" {
		return &usageError{fmt.Sprintf("%s: -o %q: use table or json (see %s --help)", f.Name(), output, f.Name())}
	}
	if *interval <= 0 {
		return &usageError{fmt.Sprintf("%s: --interval must be positive (see %s --help)", f.Name(), f.Name())}
	}
	cfg, _, err := statusConfig(*path, "")
	if err != nil {
		return err
	}
	// Ages count on the API server's clock (claims' `since` is its time),
	// which an admin's machine may not share.
	clock := kube.NewServerClock()
	client, err := statusClient(ctx, *kubeconfig, host.Root(*root), cfg.Kubernetes.Kubeconfig, clock)
	if err != nil {
		return err
	}
	// The limits as a node of this configuration takes them: the
	// cluster's settings under its files. Settings that cannot be read
	// or are bad count for nothing here (the nodes keep what they had);
	// a pause that cannot be read is reported with the rest.
	settings, _ := steer.Reader{Client: client}.Settings(ctx)
	_, local, serr := statusConfig(*path, settings)
	if serr != nil {
		if _, local, err = statusConfig(*path, ""); err != nil {
			return err
		}
		local.SettingsError = strings.ReplaceAll(strings.TrimPrefix(serr.Error(), "invalid configuration:"), "\n", " ")
	}
	local.Self = cfg.Kubernetes.NodeName
	if user, _ := status.WhoAmI(ctx, client); local.Self == "" && strings.HasPrefix(user, "system:node:") {
		local.Self = strings.TrimPrefix(user, "system:node:")
	}
	src := &status.Source{Client: client, Local: local, Now: clock.Now}
	write := statusWriter(output, *watch, *interval, stdout)
	if !*watch {
		r, err := src.Read(ctx)
		if err != nil {
			return err
		}
		return write(r)
	}
	return src.Watch(ctx, *interval, write)
}

// statusConfig loads the configuration; a file that does not exist means
// the built-in defaults (an admin's machine), anything else wrong with it
// is an error.
func statusConfig(path, settings string) (config.Config, status.Local, error) {
	var l *config.Loaded
	var err error
	if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
		if settings == "" {
			c := config.Default()
			return c, status.Local{Lock: c.Lock}, nil
		}
		if l, err = config.CheckCluster(settings); err != nil {
			return config.Config{}, status.Local{}, err
		}
		from := func(key string) string {
			if o, ok := l.Origins[key]; ok {
				return o.String()
			}
			return ""
		}
		return l.Config, status.Local{Lock: l.Config.Lock, ConcurrencyFrom: from("lock.concurrency"), GroupsFrom: from("lock.groups")}, nil
	}
	l, err = config.LoadWithCluster(path, configTrust(), settings)
	if err != nil {
		return config.Config{}, status.Local{}, err
	}
	from := func(key string) string {
		if o, ok := l.Origins[key]; ok {
			return o.String()
		}
		return ""
	}
	return l.Config, status.Local{
		Lock: l.Config.Lock, File: path,
		ConcurrencyFrom: from("lock.concurrency"), GroupsFrom: from("lock.groups"),
	}, nil
}

// statusClient connects with the given kubeconfig, else the kubelet's.
func statusClient(ctx context.Context, kubeconfig string, root host.Root, configured string, clock *kube.ServerClock) (kubernetes.Interface, error) {
	var kc kube.Kubeconfig
	var err error
	if kubeconfig != "" {
		kc, err = kube.GivenKubeconfig(kubeconfig)
	} else if kc, err = kube.Find(ctx, root, configured, host.Units{}); err != nil {
		err = fmt.Errorf("%w (off the nodes, give an admin's kubeconfig with --kubeconfig)", err)
	}
	if err != nil {
		return nil, err
	}
	rest, err := kc.Rest("kured-host/"+version.Version+" (status)", clock)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", kc.Path, err)
	}
	return client, nil
}

// statusWriter prints each snapshot: on a terminal a watch clears the
// screen and redraws; otherwise snapshots follow each other, separated by
// a blank line.
func statusWriter(output string, watch bool, interval time.Duration, stdout io.Writer) func(status.Report) error {
	redraw := watch && isTerminal(stdout)
	first := true
	return func(r status.Report) error {
		var b bytes.Buffer
		switch {
		case redraw:
			b.WriteString("\x1b[H\x1b[2J")
		case !first:
			b.WriteString("\n")
		}
		first = false
		if watch && output == "table" {
			fmt.Fprintf(&b, "kured-host status · %s · every %s, or on a change\n\n", r.Time.UTC().Format(time.DateTime+" MST"), interval)
		}
		var err error
		if output == "json" {
			err = status.JSON(&b, r)
		} else {
			err = status.Render(&b, r)
		}
		if err != nil {
			return err
		}
		_, err = stdout.Write(b.Bytes())
		return err
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
