package daemon

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/drain"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/sentinel"
	"github.com/kured-host/kured-host/daemon/steer"
)

// TestBuild: the daemon Assemble builds once connected follows the
// configuration file as an operator writes it: the sentinel, the
// blockers in the order they are checked, the reboot method, the drain's
// settings and client, the health check, kured's marks and notifications.
func TestBuild(t *testing.T) {
	tests := []struct {
		name  string
		toml  string
		check func(t *testing.T, d *Daemon, root host.Root)
	}{
		{"defaults", ``, func(t *testing.T, d *Daemon, root host.Root) {
			if want := (sentinel.File{Path: root.Path("/run/reboot-required")}); d.Sentinel != want {
				t.Errorf("sentinel %#v, want %#v", d.Sentinel, want)
			}
			if got := blockerTypes(d.Blockers); got != "steer.Paused steer.Held *block.Inhibitors" {
				t.Errorf("blockers %s, want the operator's pause and hold, then logind's inhibitors", got)
			}
			if l, ok := d.Rebooter.(*host.BusLogind); !ok || l.Address != "unix:path=/test/bus" {
				t.Errorf("rebooter %#v, want logind on the given bus", d.Rebooter)
			}
			if d.Health != nil || d.Messages != nil {
				t.Errorf("health %v, messages %v: neither is configured", d.Health != nil, d.Messages)
			}
			if m := d.Marks.(*marks.Marker); m.Annotate || len(m.Pre) > 0 {
				t.Errorf("marks %#v, want none", m)
			}
		}},
		{"everything an operator may turn on", `
[sentinel]
command = ["/usr/bin/needs-restarting", "-r"]
reboot_exit_codes = [1]
command_timeout = "20s"
[window]
days = ["sat", "sun"]
start = "22:00"
end = "04:00"
time_zone = "Europe/Berlin"
[blockers]
pod_selectors = ["app=db"]
inhibitors = true
[blockers.prometheus]
url = "http://127.0.0.1:9/"
[drain]
grace_period = "30s"
timeout = "10m"
delete_emptydir_data = false
[reboot]
method = "command"
command = ["/sbin/reboot", "now"]
timeout = "5m"
[health]
command = ["/bin/true"]
[node]
annotate = true
[node.pre_reboot_labels]
"example.com/rebooting" = "true"
[notify]
urls = ["generic://127.0.0.1:9/hook?disabletls=yes"]
`, func(t *testing.T, d *Daemon, _ host.Root) {
			want := sentinel.Command{Argv: []string{"/usr/bin/needs-restarting", "-r"}, RebootCodes: []int{1}, Timeout: 20 * time.Second}
			if !reflect.DeepEqual(d.Sentinel, want) {
				t.Errorf("sentinel %#v, want %#v", d.Sentinel, want)
			}
			if got, want := blockerTypes(d.Blockers), "steer.Paused steer.Held *block.Window *block.Pods *block.Alerts *block.Inhibitors"; got != want {
				t.Errorf("blockers %s, want %s", got, want)
			}
			if w := d.Blockers[2].(*block.Window); w.Start != 22*3600 || w.End != 4*3600 || w.Loc.String() != "Europe/Berlin" ||
				!reflect.DeepEqual(w.Days, []time.Weekday{time.Sunday, time.Saturday}) && !reflect.DeepEqual(w.Days, []time.Weekday{time.Saturday, time.Sunday}) {
				t.Errorf("window %+v", w)
			}
			if p := d.Blockers[3].(*block.Pods); len(p.Selectors) != 1 || p.Selectors[0].String() != "app=db" || p.Node != "node-1" {
				t.Errorf("pod blocker %+v", p)
			}
			// The looks read the orders from the watch; the last one,
			// before the cordon, reads the pause fresh and keeps the
			// others (the lock checks the hold on the commit's own base).
			if p := d.Blockers[0].(steer.Paused); p.Reader.Watch == nil || p.Reader.Watch != d.OrdersWatch || d.Settings.(steer.Reader).Watch != nil {
				t.Errorf("the looks' orders %+v (want them read from the watch %p) and settings %+v (want them read from the API server's cache)", p.Reader, d.OrdersWatch, d.Settings)
			}
			last := d.lastLook()
			if got, want := blockerTypes(last), "*block.Recent steer.Held *block.Window *block.Pods *block.Alerts *block.Inhibitors"; got != want {
				t.Errorf("the last look's blockers %s, want %s", got, want)
			}
			// Fresh, and a read right before the announce answers it.
			if r := last[0].(*block.Recent); r.Blocker.(steer.Paused).Reader.Watch != nil || r.Blocker.(steer.Paused).Reader.Cached || r.For != freshFor {
				t.Errorf("the last look reads the pause as %+v, want fresh", r)
			}
			if h := last[1].(steer.Held); h.Reader.Watch != d.OrdersWatch {
				t.Errorf("the last look reads the hold as %+v, want it from the watch %p", h.Reader, d.OrdersWatch)
			}
			if r, ok := d.Rebooter.(host.CommandRebooter); !ok || !reflect.DeepEqual(r.Argv, []string{"/sbin/reboot", "now"}) || r.Timeout != 5*time.Minute {
				t.Errorf("rebooter %#v", d.Rebooter)
			}
			if dr := d.Drainer.(*drain.Drainer); dr.GracePeriod != 30*time.Second || dr.Timeout != 10*time.Minute || dr.DeleteEmptyDirData {
				t.Errorf("drain options %+v", dr.Options)
			}
			if d.Health == nil || d.Messages == nil {
				t.Errorf("health %v, messages %v: both are configured", d.Health != nil, d.Messages != nil)
			}
			if m := d.Marks.(*marks.Marker); !m.Annotate || m.Pre["example.com/rebooting"] != "true" {
				t.Errorf("marks %#v", m)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(file, []byte("version = 1\n"+tt.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := config.LoadFiles(file)
			if err != nil {
				t.Fatal(err)
			}
			root := host.Root(t.TempDir())
			kube, evictions := fake.NewClientset(), fake.NewClientset()
			d, err := build(Setup{Config: l.Config, Root: root, Log: slog.New(slog.DiscardHandler), BusAddress: "unix:path=/test/bus"},
				Clients{Kube: kube, Metadata: metadatafake.NewSimpleMetadataClient(runtime.NewScheme()), Evictions: evictions, ServerNow: time.Now}, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			if d.Node != "node-1" || d.Lock == nil || d.Metrics == nil || d.Events == nil {
				t.Fatalf("daemon %+v", d)
			}
			if dr := d.Drainer.(*drain.Drainer); dr.Client != evictions || dr.Node != "node-1" {
				t.Errorf("the drain must use the eviction client, on node-1: %+v", dr)
			}
			tt.check(t, d, root)
		})
	}
}

// TestBuildKeepsGoingWithABadNotificationURL: a notification service that
// cannot be prepared at start (the loader refuses URLs the library cannot
// parse; matrix logs in to a server that may be down at boot) is logged,
// its secrets redacted, and the daemon starts: messages never stop
// reboots.
func TestBuildKeepsGoingWithABadNotificationURL(t *testing.T) {
	c := config.Default()
	var u config.URL
	if err := u.UnmarshalText([]byte("matrix://bot:S3cr3tT0ken@127.0.0.1:1/?rooms=ops")); err != nil {
		t.Fatal(err)
	}
	c.Notify.URLs = []config.URL{u}
	var logs bytes.Buffer
	d, err := build(Setup{Config: c, Log: slog.New(slog.NewTextHandler(&logs, nil))}, Clients{Kube: fake.NewClientset()}, "node-1")
	if err != nil || d == nil {
		t.Fatalf("the start stopped: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "cannot prepare a notification service") || strings.Contains(out, "S3cr3tT0ken") {
		t.Errorf("log:\n%s", out)
	}
}

func blockerTypes(bs []block.Blocker) string {
	var ts []string
	for _, b := range bs {
		ts = append(ts, fmt.Sprintf("%T", b))
	}
	return strings.Join(ts, " ")
}
