package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/test/cluster"
)

const zoneLabel = config.ZoneLabel

// scenario is one roll: nodes that all need a reboot at once.
type scenario struct {
	name, title string
	nodes       int
	zones       int // 0: no zone labels
	concurrency int
	groupMax    int // per zone; 0: no group rule
	down        time.Duration
	podStop     time.Duration
	namer       func(i int) string
	// steer: an operator holds the last node from the start, pauses the
	// roll once two nodes are done, resumes it, and unholds the node.
	steer bool
}

func (s scenario) zoneOf(i int) string {
	if s.zones == 0 {
		return ""
	}
	return fmt.Sprintf("eastus-%d", i%s.zones+1)
}

func (s scenario) limits() claim.Limits {
	l := claim.Limits{Concurrency: s.concurrency}
	if s.groupMax > 0 {
		l.Groups = []claim.GroupLimit{{Label: zoneLabel, Max: s.groupMax}}
	}
	return l
}

func (s scenario) config(h *cluster.SimHost) config.Config {
	c := config.Default()
	c.Lock.Concurrency = s.concurrency
	c.Lock.Groups = []config.GroupLimit{} // not nil: nil would mean the default rule
	if s.groupMax > 0 {
		c.Lock.Groups = []config.GroupLimit{{Label: zoneLabel, Max: s.groupMax}}
	}
	c.Sentinel.Period = config.Duration(5 * time.Second)
	c.Reboot.Method, c.Reboot.Command = config.RebootCommand, h.RebootCommand()
	c.Blockers.Inhibitors = false // no system bus on a simulated host
	c.Drain.Timeout = config.Duration(time.Minute)
	return c
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parse(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	fmt.Fprintln(out, "Starting an embedded cluster: etcd, kube-apiserver with the Node authorizer and NodeRestriction, the disruption controller...")
	cp, err := cluster.Start(cluster.Options{})
	if err != nil {
		return err
	}
	defer cp.Stop()
	dir, err := os.MkdirTemp("", "kured-host-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(out, "Building kured-host...")
	bin, err := cluster.BuildKuredHost(dir)
	if err != nil {
		return err
	}
	var failed []string
	for _, s := range o.scenarios() {
		res, err := s.run(ctx, cp, bin, o, out)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		res.print(out)
		if len(res.problems) > 0 {
			failed = append(failed, s.name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenario %v failed: see above", failed)
	}
	return nil
}

// run sets the scenario up on cp, lets kured-host roll it and audits it.
func (s scenario) run(ctx context.Context, cp *cluster.ControlPlane, bin string, o options, out io.Writer) (*result, error) {
	fmt.Fprintf(out, "\n== %s\n", s.title)
	var hosts []*cluster.SimHost
	var daemons []*cluster.KuredHost
	defer func() {
		for _, h := range hosts {
			cp.RemoveHost(context.Background(), h)
		}
	}()
	for i := range s.nodes {
		labels := map[string]string{}
		if z := s.zoneOf(i); z != "" {
			labels[zoneLabel] = z
		}
		h, err := cp.AddHost(ctx, cluster.HostOptions{Name: s.namer(i), Labels: labels, DownTime: s.down, PodStopDelay: s.podStop})
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	if err := workload(ctx, cp, s, hosts); err != nil {
		return nil, err
	}
	inScope := map[string]bool{}
	for _, h := range hosts {
		inScope[h.Name] = true
		k, err := h.RunKuredHost(bin, s.config(h))
		if err != nil {
			return nil, err
		}
		daemons = append(daemons, k)
	}
	a, err := cp.StartAuditor(ctx)
	if err != nil {
		return nil, err
	}
	defer a.Stop()
	a.Scope = func(n string) bool { return inScope[n] }

	var d *director
	if s.steer {
		if d, err = newDirector(cp, bin, filepath.Dir(bin), hosts[len(hosts)-1].Name); err != nil {
			return nil, err
		}
		if err := d.start(ctx); err != nil {
			return nil, err
		}
		d.print(out)
	}
	fmt.Fprintf(out, "%d nodes, kured-host running on each; creating /run/reboot-required everywhere.\n\n", s.nodes)
	began := time.Now()
	for _, h := range hosts {
		if err := h.SetRebootRequired(true); err != nil {
			return nil, err
		}
	}
	v := &view{cp: cp, s: s, hosts: hosts, out: out, tty: !o.noTTY, began: began, director: d}
	if err := v.until(ctx, func() bool { return allDone(hosts, v.last) }); err != nil {
		for _, k := range daemons {
			fmt.Fprintf(out, "--- kured-host on %s (last lines):\n%s\n", k.Host.Name, tail(k.Logs(), 1500))
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("the roll did not finish in %s", o.timeout)
		}
		return nil, err
	}
	end := time.Now()
	if err := a.Sync(ctx); err != nil {
		return nil, err
	}
	r := summarize(s, a, hosts, began, end)
	if d != nil {
		d.report(a, r)
	}
	return r, nil
}

// workload gives each node two replicated pods, under a budget that allows
// as many disruptions as the concurrency, so that drains have work to do
// and evictions go through the real disruption controller.
func workload(ctx context.Context, cp *cluster.ControlPlane, s scenario, hosts []*cluster.SimHost) error {
	ns := "demo-" + s.name
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	labels := map[string]string{"app": "web"}
	n := 2 * len(hosts)
	rs, err := cp.ReplicaSet(ctx, ns, "web", int32(n), labels)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		for i := range 2 {
			if _, err := cp.Pod(ctx, h, ns, fmt.Sprintf("web-%s-%d", h.Name, i), cluster.Replicated, rs, labels); err != nil {
				return err
			}
		}
	}
	cp.Recreate(ctx, rs, hosts)
	if _, err := cp.PDB(ctx, ns, "web", n-2*s.concurrency, labels); err != nil {
		return err
	}
	return cp.WaitPDB(ctx, ns, "web", int32(2*s.concurrency))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
