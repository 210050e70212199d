package cycletest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/test/cluster"
)

// adminCLI writes an admin's kubeconfig and returns a runner of the
// binary with it: exit status, stdout, stderr.
func adminCLI(t *testing.T, ctx context.Context, user string) func(args ...string) (int, string, string) {
	t.Helper()
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := cp.WriteKubeconfig(admin, user, []string{"system:masters"}); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (int, string, string) {
		t.Helper()
		var out, errs bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", admin)...)
		cmd.Stdout, cmd.Stderr = &out, &errs
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return exit.ExitCode(), out.String(), errs.String()
		case err != nil:
			t.Fatal(err)
		}
		return 0, out.String(), errs.String()
	}
}

// liftPause removes the pause keys as an admin would with kubectl, for
// the tests' cleanup.
func liftPause(t *testing.T) {
	t.Cleanup(func() {
		_, _ = cp.Admin.CoreV1().ConfigMaps(steer.Namespace).Patch(context.Background(), steer.Name, types.MergePatchType,
			[]byte(`{"data":{"paused":null,"paused-by":null,"paused-since":null}}`), metav1.PatchOptions{})
	})
}

// TestResumeUnholdPrecondition: resume and unhold lift the order they
// read and no other, against the real API server. The command cannot be
// stopped between its read and its write, so the test goes through the
// same functions with a pause in between: an operator reads pause A,
// another replaces it with B, the first's conditional write is refused
// and B stays, the error showing it; a change to another key of the
// ConfigMap in between is retried and the pause lifted. The same for a
// node's hold, where a change of another label or of the Node's status
// in between (its kubelet writes it every few seconds) is retried. Then
// the commands themselves: pause and resume, hold and unhold, with the
// Node's status written every 25 ms meanwhile (its kubelet: every 10 s).
func TestResumeUnholdPrecondition(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	liftPause(t)
	admin := cp.Admin
	cms := admin.CoreV1().ConfigMaps(steer.Namespace)
	pauseNow := func() (string, string) {
		t.Helper()
		cm, err := cms.Get(ctx, steer.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data[steer.KeyPaused], cm.Data[steer.KeyPausedBy]
	}

	// The pause.
	if err := steer.Pause(ctx, admin, steer.Order{Reason: "incident A", By: "alice", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	seen, err := steer.ReadPause(ctx, admin)
	if err != nil || !seen.On || seen.Order.Reason != "incident A" {
		t.Fatalf("ReadPause: %+v, %v", seen, err)
	}
	if err := steer.Pause(ctx, admin, steer.Order{Reason: "incident B\x1b[2J", By: "bob", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, err = steer.LiftPause(ctx, admin, seen)
	if !errors.Is(err, steer.ErrChanged) || !strings.Contains(err.Error(), `by bob: incident B\x1b[2J`) ||
		!strings.Contains(err.Error(), "run kured-host resume again") || strings.Contains(err.Error(), "\x1b") {
		t.Errorf("resume of A after B: %v; want it refused, B shown escaped", err)
	}
	if reason, by := pauseNow(); reason != "incident B\x1b[2J" || by != "bob" {
		t.Errorf("after the refused resume the pause is %q by %q, want B by bob", reason, by)
	}
	seen, err = steer.ReadPause(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := steer.SetSettings(ctx, admin, "# changed in between\n"); err != nil {
		t.Fatal(err)
	}
	if lifted, err := steer.LiftPause(ctx, admin, seen); err != nil || !lifted.On || lifted.Order.By != "bob" {
		t.Errorf("resume of B after a change of the settings: %+v, %v; want B lifted", lifted, err)
	}
	if reason, _ := pauseNow(); reason != "" {
		t.Errorf("the pause %q is still there", reason)
	}

	// The hold.
	h, err := cp.AddHost(ctx, cluster.HostOptions{Name: "precond-0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.RemoveHost(context.Background(), h) })
	node := h.Name
	holdNow := func() (string, string) {
		t.Helper()
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels[steer.HoldLabel], n.Annotations[steer.HoldReason]
	}
	if err := steer.Hold(ctx, admin, node, steer.Order{Reason: "driver freeze", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	seen, err = steer.ReadHold(ctx, admin, node)
	if err != nil || !seen.On {
		t.Fatalf("ReadHold: %+v, %v", seen, err)
	}
	if err := steer.Hold(ctx, admin, node, steer.Order{Reason: "firmware\u202echeck", By: "bob"}); err != nil {
		t.Fatal(err)
	}
	_, err = steer.LiftHold(ctx, admin, node, seen)
	if !errors.Is(err, steer.ErrChanged) || !strings.Contains(err.Error(), `by bob: firmware\u202echeck`) ||
		!strings.Contains(err.Error(), "run kured-host unhold "+node+" again") || strings.Contains(err.Error(), "\u202e") {
		t.Errorf("unhold after another hold: %v; want it refused, the new hold shown escaped", err)
	}
	if label, reason := holdNow(); label != "true" || reason != "firmware\u202echeck" {
		t.Errorf("after the refused unhold: label %q, reason %q; want bob's hold", label, reason)
	}
	seen, err = steer.ReadHold(ctx, admin, node)
	if err != nil {
		t.Fatal(err)
	}
	adminPatch(t, ctx, node, map[string]any{"labels": map[string]any{"example.com/pool": "gpu"}})
	busy := func() {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"example.com/Busy","status":"True","reason":"Test","message":"%d"}]}}`, time.Now().UnixNano())
		if _, err := admin.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	}
	busy()
	if lifted, err := steer.LiftHold(ctx, admin, node, seen); err != nil || !lifted.On {
		t.Errorf("unhold after a label and a status change: %+v, %v; want the hold lifted", lifted, err)
	}
	if label, reason := holdNow(); label != "" || reason != "" {
		t.Errorf("after the unhold: label %q, reason %q", label, reason)
	}

	// The commands, on a busy Node.
	run := adminCLI(t, ctx, "precond-admin")
	var writes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond): // a kubelet: every 10 s
			}
			busy()
			writes.Add(1)
		}
	}()
	for i := range 3 {
		if code, out, errs := run("hold", node, "--reason", fmt.Sprintf("round %d", i)); code != 0 {
			t.Fatalf("hold: exit %d\n%s%s", code, out, errs)
		}
		if code, out, errs := run("unhold", node); code != 0 || out != "unheld "+node+"\n" {
			t.Errorf("unhold of a busy node: exit %d, %q\n%s", code, out, errs)
		}
		if label, _ := holdNow(); label != "" {
			t.Errorf("round %d: still held after unhold", i)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d status writes to %s while the commands ran", writes.Load(), node)
	if code, out, errs := run("pause", "--reason", "CVE triage"); code != 0 {
		t.Fatalf("pause: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := run("resume"); code != 0 || !strings.Contains(out, "resumed (was paused since ") || !strings.Contains(out, "by precond-admin: CVE triage") {
		t.Errorf("resume: exit %d, %q\n%s", code, out, errs)
	}
	if code, out, _ := run("resume"); code != 0 || out != "the cluster was not paused\n" {
		t.Errorf("resume again: exit %d, %q", code, out)
	}
}

// TestOrderTextEscaped: a pause reason and a hold reason with a terminal
// escape, a carriage return and a bidirectional override reach the
// node's Event, `status`, and what pause, hold and resume print, only
// escaped.
func TestOrderTextEscaped(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	liftPause(t)
	run := adminCLI(t, ctx, "esc-admin")
	const reason, escaped = "incident \x1b[2J\rall clear\u202eevil", `incident \x1b[2J\rall clear\u202eevil`
	n := startNode(t, ctx, nodeSpec{name: "esc-0"})
	raw := func(what, s string) {
		t.Helper()
		if strings.ContainsAny(s, "\x1b\r\u202e") {
			t.Errorf("%s holds the raw characters: %q", what, s)
		}
	}
	code, out, errs := run("pause", "--reason", reason)
	if code != 0 || !strings.Contains(out, "by esc-admin: "+escaped) {
		t.Errorf("pause: exit %d, %q\n%s", code, out, errs)
	}
	raw("pause's output", out+errs)
	code, out, errs = run("hold", n.h.Name, "--reason", "held: "+reason)
	if code != 0 || !strings.Contains(out, "held: "+escaped) {
		t.Errorf("hold: exit %d, %q\n%s", code, out, errs)
	}
	raw("hold's output", out+errs)
	if err := n.h.SetRebootRequired(true); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ctx, n.h.Name, "Blocked", "reboots are paused for the cluster: since ")
	list, err := cp.Admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + n.h.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		raw("Event "+e.Reason, e.Message)
		if e.Reason == "Blocked" && (!strings.Contains(e.Message, "by esc-admin: "+escaped+" (kured-host resume)") ||
			!strings.Contains(e.Message, "by esc-admin: held: "+escaped+" (kured-host unhold "+n.h.Name+")")) {
			t.Errorf("the Blocked Event does not show the reasons escaped: %q", e.Message)
		}
	}
	code, out, errs = run("status", "--config", filepath.Join(t.TempDir(), "none.toml"))
	if code != 0 || !strings.Contains(out, "PAUSED: since ") || !strings.Contains(out, escaped) || !strings.Contains(out, "held: "+n.h.Name+", since ") {
		t.Errorf("status: exit %d\n%s%s", code, out, errs)
	}
	raw("status", out+errs)
	code, out, errs = run("unhold", n.h.Name)
	if code != 0 {
		t.Errorf("unhold: exit %d, %q\n%s", code, out, errs)
	}
	code, out, errs = run("resume")
	if code != 0 || !strings.Contains(out, "resumed (was paused since ") || !strings.Contains(out, escaped) {
		t.Errorf("resume: exit %d, %q\n%s", code, out, errs)
	}
	raw("resume's output", out+errs)
}
