package host

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/host/logindtest"
)

func TestSplitCommandLine(t *testing.T) {
	tests := []struct {
		in   string
		want []string // nil: refused
	}{
		{"/usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf --v=2", []string{"/usr/bin/kubelet", "--kubeconfig=/etc/kubernetes/kubelet.conf", "--v=2"}},
		{`/usr/bin/kubelet "--node-labels=a=b c" --x`, []string{"/usr/bin/kubelet", "--node-labels=a=b c", "--x"}},
		{`kubelet "a \"quoted\" \$HOME \\ \` + "`" + `"`, []string{"kubelet", "a \"quoted\" $HOME \\ `"}},
		{`kubelet 'single quoted' $'c\tstyle\x41\n'`, []string{"kubelet", "single quoted", "c\tstyleA\n"}},
		{`kubelet --kubeconfig="/etc/kube config"`, []string{"kubelet", "--kubeconfig=/etc/kube config"}},
		{"kubelet  --two-spaces ", []string{"kubelet", "--two-spaces"}},
		{"[kthreadd]", nil},
		{"", nil},
		{`kubelet "unterminated`, nil},
		{`kubelet 'unterminated`, nil},
		{`kubelet $'\q'`, nil},
	}
	for _, tt := range tests {
		got, err := SplitCommandLine(tt.in)
		if (err != nil) != (tt.want == nil) || !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestUnitsOnARealBus asks a systemd stand-in on a private bus: the
// processes of a running unit with their argv, none for a unit that is
// not running or that systemd does not know.
func TestUnitsOnARealBus(t *testing.T) {
	sd := logindtest.StartSystemd(t)
	sd.SetUnit("kubelet.service",
		logindtest.Process{Cgroup: "/system.slice/kubelet.service", PID: 812, Cmdline: `/usr/bin/kubelet "--kubeconfig=/etc/kubernetes/kubelet.conf"`},
		logindtest.Process{Cgroup: "/system.slice/kubelet.service", PID: 2, Cmdline: "[kworker]"})
	sd.SetUnit("rke2-agent.service")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := Units{Address: sd.Address}

	got, err := u.Processes(ctx, "kubelet.service")
	if err != nil || len(got) != 1 || got[0].PID != 812 || !slices.Equal(got[0].Argv, []string{"/usr/bin/kubelet", "--kubeconfig=/etc/kubernetes/kubelet.conf"}) {
		t.Errorf("kubelet.service: %+v, %v", got, err)
	}
	for _, unit := range []string{"rke2-agent.service", "k0sworker.service"} {
		if got, err := u.Processes(ctx, unit); err != nil || len(got) != 0 {
			t.Errorf("%s: %+v, %v; want none", unit, got, err)
		}
	}
	sd.Close()
	if _, err := u.Processes(ctx, "kubelet.service"); err == nil {
		t.Error("no error with no systemd on the bus")
	}
}
