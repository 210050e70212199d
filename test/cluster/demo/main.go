// Command demo shows kured-host doing its job on an embedded cluster: a
// real kube-apiserver (the cluster harness), simulated hosts, and the real
// kured-host binary running on each of them with the node's own
// credentials. Scenario "seed" is the kured pull request's: eight nodes,
// concurrency 2. Scenario "zones" is its reviewers' ask: six nodes in three
// zones, concurrency 2, at most one per zone. An auditor watches every
// revision of every Node; a violation of a limit, a release without a
// reboot or a node left cordoned fails the demo.
//
//	make demo
//	cd test/cluster && go run ./demo --help
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options are the demo's flags; zero values take the scenario's defaults.
type options struct {
	scenario    string
	nodes       int
	zones       int
	concurrency int
	groupMax    int
	down        time.Duration
	podStop     time.Duration
	fast        bool
	noTTY       bool
	timeout     time.Duration
}

func parse(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.scenario, "scenario", "all", "seed (8 nodes, concurrency 2), zones (6 nodes in 3 zones, 2 at once, 1 per zone), steer (6 nodes, concurrency 2: a pause and a hold from kured-host's commands), or all")
	fs.IntVar(&o.nodes, "nodes", 0, "number of nodes (default: the scenario's)")
	fs.IntVar(&o.zones, "zones", -1, "number of zones, 0 for none (default: the scenario's)")
	fs.IntVar(&o.concurrency, "concurrency", 0, "nodes rebooting at once (default: the scenario's)")
	fs.IntVar(&o.groupMax, "group-max", 0, "nodes rebooting at once per zone (default: the scenario's)")
	fs.DurationVar(&o.down, "down", 4*time.Second, "how long a simulated reboot keeps a node down")
	fs.DurationVar(&o.podStop, "pod-stop", time.Second, "how long a pod takes to stop when evicted")
	fs.BoolVar(&o.fast, "fast", false, "a fast pace for CI: 500ms down, 100ms pod stop")
	fs.BoolVar(&o.noTTY, "no-tty", false, "plain lines instead of a view refreshed in place (the default when stdout is not a terminal)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.fast {
		o.down, o.podStop = 500*time.Millisecond, 100*time.Millisecond
	}
	if !isTerminal(os.Stdout) {
		o.noTTY = true
	}
	switch o.scenario {
	case "seed", "zones", "steer", "all":
	default:
		return o, fmt.Errorf("--scenario %q: want seed, zones, steer or all", o.scenario)
	}
	return o, nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// scenarios returns the scenarios to run with the flags applied.
func (o options) scenarios() []scenario {
	var out []scenario
	if o.scenario == "seed" || o.scenario == "all" {
		out = append(out, scenario{
			name: "seed", title: "The seed's roll: 8 nodes, concurrency 2, every node needs a reboot",
			nodes: 8, concurrency: 2, namer: func(i int) string { return fmt.Sprintf("aks-nodepool1-14327021-vmss%06d", i) },
		})
	}
	if o.scenario == "zones" || o.scenario == "all" {
		out = append(out, scenario{
			name: "zones", title: "The reviewers' ask: 6 nodes in 3 zones, concurrency 2, at most 1 per zone",
			nodes: 6, zones: 3, concurrency: 2, groupMax: 1,
			namer: func(i int) string { return fmt.Sprintf("aks-zonal-19561347-vmss%06d", i) },
		})
	}
	if o.scenario == "steer" || o.scenario == "all" {
		out = append(out, scenario{
			name: "steer", title: "An operator steers a roll: 6 nodes, concurrency 2; one node held, the cluster paused once two are done, then resumed",
			nodes: 6, concurrency: 2, steer: true,
			namer: func(i int) string { return fmt.Sprintf("aks-steer-28417093-vmss%06d", i) },
		})
	}
	for i := range out {
		s := &out[i]
		if o.nodes > 0 {
			s.nodes = o.nodes
		}
		if o.zones >= 0 {
			s.zones = o.zones
		}
		if o.concurrency > 0 {
			s.concurrency = o.concurrency
		}
		if o.groupMax > 0 {
			s.groupMax = o.groupMax
		}
		if s.zones > 0 && s.groupMax == 0 {
			s.groupMax = 1
		}
		s.down, s.podStop = o.down, o.podStop
	}
	return out
}
