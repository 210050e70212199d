package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/kube"
)

// Paths inside a host's root directory, as on a real node (kubeadm layout).
const (
	SentinelPath   = "run/reboot-required"
	BootIDPath     = "proc/sys/kernel/random/boot_id"
	KubeconfigPath = "etc/kubernetes/kubelet.conf"
	CertDir        = "var/lib/kubelet/pki"
	CurrentCert    = "var/lib/kubelet/pki/kubelet-client-current.pem"
	// rebootRequestPath is what RebootCommand creates to ask the harness
	// to reboot the host.
	rebootRequestPath = "run/kured-host-sim/reboot-request"
)

// HostOptions describe a simulated host.
type HostOptions struct {
	Name   string
	Labels map[string]string // set by the kubelet at registration, e.g. the zone
	// DownTime is how long a reboot keeps the host down (default 1s).
	DownTime time.Duration
	// PodStopDelay is how long the kubelet stand-in takes to finish a pod
	// that is being deleted (default 0: at once).
	PodStopDelay time.Duration
	// CertLifetime is the validity of the node's client certificate
	// (default 24h); RotateCert issues a new one.
	CertLifetime time.Duration
	// AutoReboot makes the host reboot when RebootCommand is run (default
	// on; turn it off to leave reboot requests unanswered).
	NoAutoReboot bool
	// AbruptShutdown: the kubelet is killed at shutdown without marking
	// the Node NotReady (no graceful node shutdown), so the Node still
	// says Ready, with the old boot's ID, until the kubelet reports again.
	AbruptShutdown bool
	// KubeletDelay is how long after a reboot the kubelet stand-in waits
	// before it reports the new boot (as a real one waiting for its
	// container runtime); the host's services start without waiting.
	KubeletDelay time.Duration
}

// SimHost is a simulated node: a root directory with the files a real node
// has (sentinel, boot ID, kubelet kubeconfig and client certificate), a
// kubelet stand-in that uses the node's own credentials, and the services
// that run "on" it, which a reboot stops and starts again.
type SimHost struct {
	Name string
	// Root is the host's root directory; its files are at Root/<path>.
	Root string
	// Kubeconfig is the kubelet's kubeconfig (Root/etc/kubernetes/kubelet.conf),
	// which names the client certificate by its path on the host, as
	// kubeadm's does: read it under Root.
	Kubeconfig string
	// ClientKubeconfig has the same credentials with the certificate's
	// full path, for tools that do not know Root (status --kubeconfig).
	ClientKubeconfig string
	// Client and Config carry the node's own identity, system:node:<Name>.
	Client kubernetes.Interface
	Config *rest.Config

	cp   *ControlPlane
	opts HostOptions

	mu        sync.Mutex
	bootID    string
	boots     int
	up        bool
	rebooting bool
	bootCtx   context.Context
	bootStop  context.CancelFunc
	bootWG    sync.WaitGroup
	services  []*service
	rebootErr error
	// sentinel is closed, and forgotten, when the sentinel changes
	// (SentinelChanged).
	sentinel chan struct{}

	life     context.Context
	lifeStop context.CancelFunc
	lifeWG   sync.WaitGroup
}

type service struct {
	name   string
	run    func(ctx context.Context) error
	cmd    func() *exec.Cmd
	proc   *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{}
}

// AddHost creates a host, registers its Node through its kubelet stand-in
// (with the node's own credentials, as a kubelet does) and waits until the
// Node is Ready.
func (cp *ControlPlane) AddHost(ctx context.Context, o HostOptions) (*SimHost, error) {
	if o.DownTime == 0 {
		o.DownTime = time.Second
	}
	if o.CertLifetime == 0 {
		o.CertLifetime = 24 * time.Hour
	}
	h := &SimHost{Name: o.Name, cp: cp, opts: o, Root: filepath.Join(cp.Dir, "hosts", o.Name)}
	h.Kubeconfig = filepath.Join(h.Root, KubeconfigPath)
	h.ClientKubeconfig = h.Root + ".kubeconfig"
	for _, d := range []string{"run", filepath.Dir(BootIDPath), filepath.Dir(KubeconfigPath), CertDir, filepath.Dir(rebootRequestPath)} {
		if err := os.MkdirAll(filepath.Join(h.Root, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := h.RotateCert(); err != nil {
		return nil, err
	}
	if err := h.writeKubeconfig(); err != nil {
		return nil, err
	}
	cfg, err := h.LoadKubeconfig()
	if err != nil {
		return nil, fmt.Errorf("host %s: load kubeconfig: %w", o.Name, err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	h.Config = cfg
	if h.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if err := h.newBootID(); err != nil {
		return nil, err
	}
	cp.mu.Lock()
	if _, dup := cp.hosts[o.Name]; dup {
		cp.mu.Unlock()
		return nil, fmt.Errorf("host %s already exists", o.Name)
	}
	cp.hosts[o.Name] = h
	cp.mu.Unlock()

	h.life, h.lifeStop = context.WithCancel(context.Background())
	if err := h.boot(ctx); err != nil {
		return nil, err
	}
	if !o.NoAutoReboot {
		h.lifeWG.Add(1)
		go h.watchRebootRequests()
	}
	return h, nil
}

// RotateCert issues a new client certificate and swaps it in the way the
// kubelet does: a new file, then the kubelet-client-current.pem symlink.
func (h *SimHost) RotateCert() error {
	certPEM, keyPEM, err := h.cp.CA.ClientCert("system:node:"+h.Name, []string{"system:nodes"}, h.opts.CertLifetime)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("kubelet-client-%d.pem", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(h.Root, CertDir, name), append(certPEM, keyPEM...), 0o600); err != nil {
		return err
	}
	tmp := filepath.Join(h.Root, CertDir, ".current.tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(name, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(h.Root, CurrentCert))
}

// writeKubeconfig writes a kubeconfig shaped like kubeadm's kubelet.conf,
// with the certificate and key in the rotating file, and the same with
// the file's full path (ClientKubeconfig).
func (h *SimHost) writeKubeconfig() error {
	if err := os.WriteFile(h.Kubeconfig, KubeletConf(h.cp.ServerCA, h.cp.Server, "/"+CurrentCert), 0o600); err != nil {
		return err
	}
	return os.WriteFile(h.ClientKubeconfig, KubeletConf(h.cp.ServerCA, h.cp.Server, filepath.Join(h.Root, CurrentCert)), 0o600)
}

// LoadKubeconfig reads the host's kubeconfig as kured-host does under
// --host-root Root: the certificate it names is the host's, found again
// at each TLS handshake, so a rotation is followed.
func (h *SimHost) LoadKubeconfig() (*rest.Config, error) {
	cfg, err := kube.Kubeconfig{Path: h.Kubeconfig, How: "the simulated host's", Trust: kube.Configured, Root: host.Root(h.Root)}.Rest("kured-host-harness", nil)
	if err != nil {
		return nil, err
	}
	cfg.ContentType, cfg.AcceptContentTypes = "", "" // JSON, as before
	return cfg, nil
}

// KubeletConf is a kubeconfig shaped like kubeadm's kubelet.conf: the
// server and its CA inline, the client certificate and key in one file
// at certPath, as the kubelet keeps them after a rotation.
func KubeletConf(serverCA []byte, server, certPath string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
preferences: {}
users:
- name: default-auth
  user:
    client-certificate: %s
    client-key: %s
`, b64(serverCA), server, certPath, certPath)
}

// BootID is the current boot's ID (what /proc/sys/kernel/random/boot_id
// says on the host).
func (h *SimHost) BootID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bootID
}

// Boots counts the boots since the host was added (1 at first).
func (h *SimHost) Boots() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.boots
}

// Up reports whether the host is running (not down for a reboot).
func (h *SimHost) Up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

func (h *SimHost) newBootID() error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	p := filepath.Join(h.Root, BootIDPath)
	_ = os.Remove(p) // read-only, as the kernel's
	if err := os.WriteFile(p, []byte(id+"\n"), 0o444); err != nil {
		return err
	}
	h.mu.Lock()
	h.bootID = id
	h.mu.Unlock()
	return nil
}

// SetRebootRequired creates or removes the reboot sentinel.
func (h *SimHost) SetRebootRequired(on bool) error {
	defer h.sentinelChanged()
	p := filepath.Join(h.Root, SentinelPath)
	if on {
		return os.WriteFile(p, nil, 0o644)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// SentinelChanged returns a channel closed the next time the sentinel is
// set or removed by SetRebootRequired, or removed by a reboot: what the
// daemon learns from inotify, for the harness's drivers of the lock,
// which polled it instead (500 hosts stating it 20 times a second took an
// eighth of the bench's fleet process's CPU, which the heartbeats
// share). Take it before RebootRequired, so that a change in
// between is not missed. A sentinel written by other means is not seen.
func (h *SimHost) SentinelChanged() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sentinel == nil {
		h.sentinel = make(chan struct{})
	}
	return h.sentinel
}

// AwaitRebootRequired returns when the sentinel exists (at once if it
// does), or with ctx's error. It looks again every sentinelRecheck for a
// sentinel written by other means than SetRebootRequired, as the daemon
// looks again every period for an inotify event missed.
func (h *SimHost) AwaitRebootRequired(ctx context.Context) error {
	for {
		changed := h.SentinelChanged()
		if h.RebootRequired() {
			return nil
		}
		t := time.NewTimer(sentinelRecheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

const sentinelRecheck = 5 * time.Second

func (h *SimHost) sentinelChanged() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sentinel != nil {
		close(h.sentinel)
		h.sentinel = nil
	}
}

// RebootRequired reports whether the sentinel exists.
func (h *SimHost) RebootRequired() bool {
	_, err := os.Stat(filepath.Join(h.Root, SentinelPath))
	return err == nil
}

// RebootCommand is an argv that, run on the host, asks the harness to
// reboot it (kured-host's reboot.method = "command").
func (h *SimHost) RebootCommand() []string {
	return []string{"/usr/bin/touch", filepath.Join(h.Root, rebootRequestPath)}
}

// AddService runs f on the host now and after every boot; a reboot
// cancels its context and waits for it to return.
func (h *SimHost) AddService(name string, f func(ctx context.Context) error) {
	h.addService(&service{name: name, run: f})
}

// AddProcess runs the command cmd makes on the host now and after every
// boot; a reboot kills it (SIGKILL to its process group), as a real one
// does. Like a systemd service with Restart=on-failure and
// RestartPreventExitStatus=2, a process that exits with a status other
// than 0 and 2 is started again half a second later.
func (h *SimHost) AddProcess(name string, cmd func() *exec.Cmd) {
	h.addService(&service{name: name, cmd: cmd})
}

func (h *SimHost) addService(s *service) {
	h.mu.Lock()
	h.services = append(h.services, s)
	up, ctx := h.up, h.bootCtx
	h.mu.Unlock()
	if up {
		h.startService(ctx, s)
	}
}

func (h *SimHost) startService(bootCtx context.Context, s *service) {
	ctx, cancel := context.WithCancel(bootCtx)
	done := make(chan struct{})
	h.mu.Lock()
	s.cancel, s.done = cancel, done
	h.mu.Unlock()
	if s.run != nil {
		h.bootWG.Add(1)
		go func() {
			defer h.bootWG.Done()
			defer close(done)
			if err := s.run(ctx); err != nil && ctx.Err() == nil {
				h.cp.logf("host %s: service %s: %v", h.Name, s.name, err)
			}
		}()
		return
	}
	c := s.cmd()
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		h.cp.logf("host %s: start %s: %v", h.Name, s.name, err)
		close(done)
		return
	}
	h.mu.Lock()
	s.proc = c
	h.mu.Unlock()
	exited := make(chan struct{})
	h.bootWG.Add(2)
	go func() {
		defer h.bootWG.Done()
		defer close(done)
		defer close(exited)
		err := c.Wait()
		if ctx.Err() != nil {
			return
		}
		h.cp.logf("host %s: process %s exited: %v", h.Name, s.name, err)
		if code := c.ProcessState.ExitCode(); code != 0 && code != 2 {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
				h.bootWG.Add(1)
				go func() {
					defer h.bootWG.Done()
					h.restartAfterFailure(ctx, s)
				}()
			}
		}
	}()
	go func() {
		defer h.bootWG.Done()
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		case <-exited:
		}
	}()
}

// restartAfterFailure starts s again if it was not restarted or stopped
// meanwhile.
func (h *SimHost) restartAfterFailure(ctx context.Context, s *service) {
	h.mu.Lock()
	up, bctx := h.up, h.bootCtx
	h.mu.Unlock()
	if !up || ctx.Err() != nil || bctx.Err() != nil {
		return
	}
	h.startService(bctx, s)
}

// RestartService kills the service name as a crash would (its context is
// cancelled at once; a process gets SIGKILL) and, unless the host is down,
// starts it again: the daemon dies and systemd restarts it.
func (h *SimHost) RestartService(name string) error {
	h.mu.Lock()
	var s *service
	for _, x := range h.services {
		if x.name == name {
			s = x
		}
	}
	h.mu.Unlock()
	if s == nil {
		return fmt.Errorf("host %s: no service %s", h.Name, name)
	}
	h.mu.Lock()
	cancel, done := s.cancel, s.done
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	h.mu.Lock()
	up, ctx := h.up, h.bootCtx
	s.proc = nil
	h.mu.Unlock()
	if up {
		h.startService(ctx, s)
	}
	return nil
}

// SetReady sets the Node's Ready condition as the kubelet would report it
// (for tests of what others do with a NotReady node).
func (h *SimHost) SetReady(ctx context.Context, ready bool) error {
	k := &kubelet{h: h}
	if ready {
		return k.setReady(ctx, true, "KubeletReady", "kubelet is posting ready status")
	}
	return k.setReady(ctx, false, "KubeletNotReady", "set by the test")
}

// Process returns the running process of the service name, or nil.
func (h *SimHost) Process(name string) *os.Process {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.services {
		if s.name == name && s.proc != nil {
			return s.proc.Process
		}
	}
	return nil
}

// boot starts the kubelet stand-in, waits until it reports Ready with the
// current boot ID, then starts the services.
func (h *SimHost) boot(ctx context.Context) error {
	h.mu.Lock()
	h.bootCtx, h.bootStop = context.WithCancel(h.life)
	bctx := h.bootCtx
	h.boots++
	h.mu.Unlock()
	k := &kubelet{h: h}
	if delay := h.opts.KubeletDelay; delay > 0 && h.boots > 1 {
		h.bootWG.Go(func() {
			select {
			case <-bctx.Done():
				return
			case <-time.After(delay):
			}
			if err := k.register(bctx); err != nil {
				h.cp.logf("host %s: kubelet: %v", h.Name, err)
				return
			}
			k.run(bctx)
		})
	} else {
		if err := k.register(ctx); err != nil {
			h.bootStop()
			return fmt.Errorf("host %s: kubelet: %w", h.Name, err)
		}
		h.bootWG.Go(func() { k.run(bctx) })
	}
	h.mu.Lock()
	h.up = true
	services := h.services
	h.mu.Unlock()
	for _, s := range services {
		h.startService(bctx, s)
	}
	return nil
}

// halt stops everything running on the host: services, processes and the
// kubelet stand-in.
func (h *SimHost) halt() {
	h.mu.Lock()
	stop := h.bootStop
	h.up = false
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	h.bootWG.Wait()
	h.mu.Lock()
	for _, s := range h.services {
		s.proc = nil
	}
	h.mu.Unlock()
}

// Reboot simulates a reboot: the kubelet marks the Node NotReady (as with
// graceful node shutdown; not with AbruptShutdown), everything on the host stops, the host stays
// down for DownTime, comes back with a new boot ID and no sentinel (it
// lives on tmpfs), the kubelet reports Ready with the new boot ID (after
// KubeletDelay) and the services start again.
func (h *SimHost) Reboot(ctx context.Context) error {
	h.mu.Lock()
	if h.rebooting {
		h.mu.Unlock()
		return errors.New("already rebooting")
	}
	h.rebooting = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.rebooting = false
		h.mu.Unlock()
	}()
	if !h.opts.AbruptShutdown {
		k := &kubelet{h: h}
		if err := k.setReady(ctx, false, "KubeletNotReady", "node is shutting down for a reboot"); err != nil {
			h.cp.logf("host %s: mark NotReady: %v", h.Name, err)
		}
	}
	h.halt()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(h.opts.DownTime):
	}
	if err := os.RemoveAll(filepath.Join(h.Root, "run")); err != nil {
		return err
	}
	h.sentinelChanged()
	for _, d := range []string{"run", filepath.Dir(rebootRequestPath)} {
		if err := os.MkdirAll(filepath.Join(h.Root, d), 0o755); err != nil {
			return err
		}
	}
	if err := h.newBootID(); err != nil {
		return err
	}
	return h.boot(ctx)
}

// Shutdown powers the host off for good (end of a test).
func (h *SimHost) Shutdown() {
	h.lifeStop()
	h.halt()
	h.lifeWG.Wait()
}

// watchRebootRequests reboots the host when RebootCommand has been run.
func (h *SimHost) watchRebootRequests() {
	defer h.lifeWG.Done()
	req := filepath.Join(h.Root, rebootRequestPath)
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-h.life.Done():
			return
		case <-t.C:
		}
		if _, err := os.Stat(req); err != nil {
			continue
		}
		_ = os.Remove(req)
		if err := h.Reboot(h.life); err != nil && h.life.Err() == nil {
			h.mu.Lock()
			h.rebootErr = err
			h.mu.Unlock()
			h.cp.logf("host %s: reboot: %v", h.Name, err)
		}
	}
}

// RebootError is the error of the last requested reboot, if it failed.
func (h *SimHost) RebootError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rebootErr
}

// Host returns the host of that name.
func (cp *ControlPlane) Host(name string) *SimHost {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.hosts[name]
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// RemoveHost powers the host off for good and deletes its Node, so that a
// later test may use the name again.
func (cp *ControlPlane) RemoveHost(ctx context.Context, h *SimHost) {
	h.Shutdown()
	err := cp.Admin.CoreV1().Nodes().Delete(ctx, h.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		cp.logf("remove host %s: %v", h.Name, err)
	}
	cp.mu.Lock()
	delete(cp.hosts, h.Name)
	cp.mu.Unlock()
}
