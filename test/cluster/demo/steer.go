package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/test/cluster"
)

// director is the operator of the steering scenario: it runs the real
// binary's pause, resume, hold and unhold with an admin's kubeconfig, at
// points of the roll, and shows each command and its answer in the view.
type director struct {
	bin, kubeconfig string
	held            string // the node held from the start
	step            int
	pausedAt        time.Time
	resumedAt       time.Time
	said            []string
}

func newDirector(cp *cluster.ControlPlane, bin, dir, held string) (*director, error) {
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(kc, "demo-admin", []string{"system:masters"}); err != nil {
		return nil, err
	}
	return &director{bin: bin, kubeconfig: kc, held: held}, nil
}

// pauseFor is how long the roll stays paused.
const pauseFor = 8 * time.Second

// run runs one command, as an operator would type it.
func (d *director) run(ctx context.Context, args ...string) error {
	var out, errs bytes.Buffer
	cmd := exec.CommandContext(ctx, d.bin, append(args, "--kubeconfig", d.kubeconfig)...)
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	line := "$ kured-host " + strings.Join(args, " ") + "\n  " + strings.ReplaceAll(strings.TrimSpace(out.String()+errs.String()), "\n", "\n  ")
	d.said = append(d.said, line)
	if err != nil {
		return fmt.Errorf("kured-host %s: %v: %s", strings.Join(args, " "), err, errs.String())
	}
	return nil
}

// start holds one node before the roll.
func (d *director) start(ctx context.Context) error {
	return d.run(ctx, "hold", d.held, "--reason", "firmware check")
}

// act moves the script on once the roll has got far enough: a pause once
// two nodes are done, the resume after pauseFor, the unhold once every
// other node is done.
func (d *director) act(ctx context.Context, rows []row) error {
	done := 0
	for _, r := range rows {
		if r.boots > 1 && !r.hasClaim {
			done++
		}
	}
	switch {
	case d.step == 0 && done >= 2:
		d.step++
		d.pausedAt = time.Now()
		return d.run(ctx, "pause", "--reason", "demo: a change freeze")
	case d.step == 1 && time.Since(d.pausedAt) >= pauseFor:
		d.step++
		d.resumedAt = time.Now()
		return d.run(ctx, "resume")
	case d.step == 2 && done >= len(rows)-1:
		d.step++
		return d.run(ctx, "unhold", d.held)
	}
	return nil
}

// report adds what the operator cares about to the summary: no slot taken
// while paused, and the held node last.
func (d *director) report(a *cluster.Auditor, r *result) {
	var during int
	var last string
	prev := map[string]string{}
	for _, st := range a.History() {
		if a.Scope != nil && !a.Scope(st.Node) {
			continue
		}
		was := prev[st.Node]
		prev[st.Node] = st.ClaimLabel
		if was != string(claim.Waiting) || st.ClaimLabel != string(claim.Entering) {
			continue
		}
		last = st.Node
		if st.Seen.After(d.pausedAt.Add(time.Second)) && st.Seen.Before(d.resumedAt) {
			during++
		}
	}
	r.extra = append(r.extra,
		fmt.Sprintf("slots taken while paused:     %d (paused %s)", during, pauseFor),
		fmt.Sprintf("the held node went last:      %v (%s)", last == d.held, d.held))
	if during > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d slot(s) taken while the cluster was paused", during))
	}
	if last != d.held {
		r.problems = append(r.problems, fmt.Sprintf("%s took a slot after the held node %s", last, d.held))
	}
}

func (d *director) print(out io.Writer) {
	for _, s := range d.said {
		fmt.Fprintln(out, s)
	}
	d.said = nil
}
