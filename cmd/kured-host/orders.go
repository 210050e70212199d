package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kured-host/kured-host/daemon/kube"
	"github.com/kured-host/kured-host/daemon/printable"
	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/daemon/version"
)

const ordersAbout = `Uses an admin's kubeconfig, found as kubectl finds it: --kubeconfig,
else $KUBECONFIG, else ~/.kube/config. A node's own credentials may not
do this.`

const pauseAbout = `Pauses reboots for the whole cluster: no node joins the queue or takes a
slot; a node that has taken a slot but not yet cordoned gives it back; a
node that is draining or rebooting finishes its cycle (hold it, or
cordon it, to stop it). Waiting nodes keep their places in the queue;
"kured-host resume" lets it go on in its old order.

It writes the ConfigMap kube-system/kured-host (keys paused, paused-by,
paused-since), as this does:

  kubectl -n kube-system create configmap kured-host --from-literal=paused="kernel freeze"

` + ordersAbout

const resumeAbout = `Lifts the cluster's pause (the keys paused, paused-by and paused-since of
the ConfigMap kube-system/kured-host), as this does:

  kubectl -n kube-system patch configmap kured-host --type merge \
    -p '{"data":{"paused":null,"paused-by":null,"paused-since":null}}'

Nodes see it at their next look, within a minute. It lifts the pause it
read and no other: if another pause was set between its read and its
write, that one stays, and it says which (run it again to lift that one).

` + ordersAbout

const holdAbout = `Holds nodes out of the reboots: a held node does not join the queue,
leaves it if it waits, and gives back a slot it has taken but not yet
used (it is checked like a blocker before its cordon). It writes the
label kured-host.dev/hold and the annotations kured-host.dev/hold-reason,
-by and -since, as this does for a whole pool:

  kubectl label nodes -l pool=gpu kured-host.dev/hold=true
  kubectl annotate nodes -l pool=gpu kured-host.dev/hold-reason="driver freeze"

` + ordersAbout

const unholdAbout = `Lifts the hold of nodes, as this does:

  kubectl label nodes NODE kured-host.dev/hold-
  kubectl annotate nodes NODE kured-host.dev/hold-reason- kured-host.dev/hold-by- kured-host.dev/hold-since-

It lifts the hold it read and no other: if the node was held again
between its read and its write, that hold stays, and it says which (run
it again to lift that one).

` + ordersAbout

func runPause(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("pause", "--reason TEXT [--kubeconfig FILE]", pauseAbout)
	reason := f.String("reason", "", "why, for the nodes' messages, Events and status (required)")
	kubeconfig := kubeconfigFlag(f)
	if done, err := f.parse(args, stdout); done {
		return err
	}
	if strings.TrimSpace(*reason) == "" {
		return &usageError{"pause: --reason is required: say why, for whoever finds the cluster paused"}
	}
	c, who, err := adminClient(ctx, *kubeconfig)
	if err != nil {
		return err
	}
	o := steer.Order{Reason: *reason, By: who, Since: time.Now()}
	if err := steer.Pause(ctx, c, o); err != nil {
		return escaped{err}
	}
	_, err = fmt.Fprintf(stdout, "paused: %s\nno node takes a new reboot slot; nodes draining or rebooting finish (kured-host status shows them)\n", printable.String(o.String()))
	return err
}

func runResume(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("resume", "[--kubeconfig FILE]", resumeAbout)
	kubeconfig := kubeconfigFlag(f)
	if done, err := f.parse(args, stdout); done {
		return err
	}
	c, _, err := adminClient(ctx, *kubeconfig)
	if err != nil {
		return err
	}
	was, paused, err := steer.Resume(ctx, c)
	if err != nil {
		return escaped{err}
	}
	if !paused {
		_, err = fmt.Fprintln(stdout, "the cluster was not paused")
		return err
	}
	_, err = fmt.Fprintf(stdout, "resumed (was paused %s); the queue goes on in its order within a minute\n", printable.String(was.String()))
	return err
}

func runHold(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("hold", "NODE... --reason TEXT [--kubeconfig FILE]", holdAbout)
	reason := f.String("reason", "", "why, for the node's messages, Events and status (required)")
	kubeconfig := kubeconfigFlag(f)
	nodes, done, err := f.parseNodes(args, stdout)
	if done {
		return err
	}
	if strings.TrimSpace(*reason) == "" {
		return &usageError{"hold: --reason is required: say why, for whoever finds the node held"}
	}
	c, who, err := adminClient(ctx, *kubeconfig)
	if err != nil {
		return err
	}
	o := steer.Order{Reason: *reason, By: who, Since: time.Now()}
	for _, n := range nodes {
		if err := steer.Hold(ctx, c, n, o); err != nil {
			return escaped{err}
		}
		if _, err := fmt.Fprintf(stdout, "held %s: %s\n", printable.String(n), printable.String(o.String())); err != nil {
			return err
		}
	}
	return nil
}

func runUnhold(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("unhold", "NODE... [--kubeconfig FILE]", unholdAbout)
	kubeconfig := kubeconfigFlag(f)
	nodes, done, err := f.parseNodes(args, stdout)
	if done {
		return err
	}
	c, _, err := adminClient(ctx, *kubeconfig)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		held, err := steer.Unhold(ctx, c, n)
		if err != nil {
			return escaped{err}
		}
		msg := "unheld " + printable.String(n)
		if !held {
			msg = printable.String(n) + " was not held"
		}
		if _, err := fmt.Fprintln(stdout, msg); err != nil {
			return err
		}
	}
	return nil
}

// escaped is an error whose text comes from the cluster (an API server's
// message, an order another operator wrote): shown escaped, with its
// chain kept for the exit status.
type escaped struct{ err error }

func (e escaped) Error() string { return printable.Lines(e.err.Error()) }
func (e escaped) Unwrap() error { return e.err }

func kubeconfigFlag(f *flags) *string {
	return f.String("kubeconfig", "", "an admin's kubeconfig `file` (default: $KUBECONFIG, else ~/.kube/config)")
}

// parseNodes parses flags and node names in any order, as kubectl does,
// and wants at least one node.
func (f *flags) parseNodes(args []string, stdout io.Writer) (nodes []string, done bool, err error) {
	for {
		if err := f.Parse(args); err != nil {
			_, perr := f.parse(args, stdout) // --help, or the usage error
			return nil, true, perr
		}
		if f.NArg() == 0 {
			break
		}
		nodes = append(nodes, f.Arg(0))
		args = f.Args()[1:]
	}
	if len(nodes) == 0 {
		return nil, true, &usageError{fmt.Sprintf("%s: name at least one node (see %s --help)", f.Name(), f.Name())}
	}
	return nodes, false, nil
}

// adminClient connects as kubectl would, and says who the user is (for
// the order's "by"; "" if the API server will not say).
func adminClient(ctx context.Context, kubeconfig string) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w (give an admin's with --kubeconfig)", err)
	}
	cfg.UserAgent = "kured-host/" + version.Version + " (admin)"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	who, _, _ := kube.WhoAmI(ctx, c)
	return c, who, nil
}
