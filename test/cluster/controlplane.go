// Package cluster is kured-host's test harness: a real kube-apiserver and
// etcd in-process, with the Node authorizer and the NodeRestriction
// admission plugin, the real disruption controller, and simulated hosts
// (SimHost) that each have their own system:node:<name> client certificate,
// a kubelet stand-in and a host root directory. An Auditor watches every
// Node change and checks the reboot invariants.
package cluster

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/pkg/controller/disruption"

	"github.com/kured-host/kured-host/packaging"
)

// Options configure a control plane.
type Options struct {
	// Log receives the API server's, etcd's and the harness's own logs;
	// nil discards them.
	Log io.Writer
	// NoRBACManifest leaves out kured-host's RBAC manifest, to see what
	// the Node authorizer alone allows.
	NoRBACManifest bool
	// AuditLog makes the API server log every request (audit level
	// Metadata, JSON lines) to ControlPlane.AuditLogPath, for counting
	// requests with ControlPlane.AuditLog.
	AuditLog bool
	// ServeAddress is an IP address of this machine where the API server
	// is also reachable (ControlPlane.ServeURL), for clients that cannot
	// reach this process's loopback, such as a VM on a tap device. The
	// test server's certificate is valid for 127.0.0.1 and 10.0.0.1 (the
	// first address of its service range) only, so 10.0.0.1 is the one
	// address that works; Start fails with another.
	ServeAddress string
	// OwnProcess runs etcd, kube-apiserver and the controllers in a child
	// process (this test binary again, whose TestMain must call
	// ServeControlPlane first), with its own heap and garbage collector:
	// the benchmarks' hundreds of simulated hosts then stay out of the
	// API server's latencies, as on a real cluster, where they are other
	// machines. The hosts, their daemons and the Auditor run here.
	OwnProcess bool
}

// ControlPlane is etcd, kube-apiserver and the controllers the tests need.
type ControlPlane struct {
	// Admin is a superuser client (the API server's loopback identity).
	Admin       kubernetes.Interface
	AdminConfig *rest.Config
	// Server is the API server's URL; ServerCA the PEM that verifies it.
	Server   string
	ServerCA []byte
	// CA signs client certificates (nodes, users).
	CA  *CA
	Dir string
	// StartTime is how long Start took.
	StartTime time.Duration
	// AuditLogPath is the API server's audit log (Options.AuditLog), ""
	// without one.
	AuditLogPath string
	// ServeURL is the API server's URL at Options.ServeAddress, "" without
	// one.
	ServeURL string
	// Pid is the control plane's process (Options.OwnProcess), 0 when it
	// runs in this one.
	Pid int

	log    io.Writer
	tb     *processTB
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	hosts map[string]*SimHost
	beats heartbeats
}

// Start runs etcd and kube-apiserver with --authorization-mode=Node,RBAC
// and NodeRestriction, applies kured-host's RBAC manifest, and starts the
// disruption controller and a node-lifecycle stand-in, in this process or
// (Options.OwnProcess) in a child. Stop it with Stop.
func Start(opts Options) (*ControlPlane, error) {
	if !opts.OwnProcess {
		return startHere(opts)
	}
	if opts.ServeAddress != "" {
		return nil, errors.New("start control plane: ServeAddress needs the control plane in this process")
	}
	began := time.Now()
	cp, err := newControlPlane(opts)
	if err != nil {
		return nil, err
	}
	if err := cp.startProcess(opts); err != nil {
		cp.Stop()
		return nil, err
	}
	cp.logf("control plane ready at %s in process %d in %s (its own start %s)", cp.Server, cp.Pid,
		time.Since(began).Round(time.Millisecond), cp.StartTime.Round(time.Millisecond))
	cp.StartTime = time.Since(began)
	return cp, nil
}

// newControlPlane is a control plane with nothing started.
func newControlPlane(opts Options) (*ControlPlane, error) {
	dir, err := os.MkdirTemp("", "kured-host-cluster-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, log: opts.Log, hosts: map[string]*SimHost{}}
	cp.tb = &processTB{w: opts.Log, dir: dir}
	cp.ctx, cp.cancel = context.WithCancel(context.Background())
	return cp, nil
}

// startHere starts the control plane in this process.
func startHere(opts Options) (cp *ControlPlane, err error) {
	began := time.Now()
	if cp, err = newControlPlane(opts); err != nil {
		return nil, err
	}
	dir := cp.Dir
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("start control plane: %s", f.msg)
		}
		if err != nil {
			cp.Stop()
			cp = nil
		}
	}()
	quietKlog(opts.Log)

	if cp.CA, err = NewCA("kured-host-test-client-ca"); err != nil {
		return cp, err
	}
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, cp.CA.PEM, 0o644); err != nil {
		return cp, err
	}
	etcdURL, err := cp.startEtcd()
	if err != nil {
		return cp, err
	}
	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	flags := []string{
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--disable-admission-plugins=ServiceAccount",
		"--client-ca-file=" + caFile,
		"--endpoint-reconciler-type=none",
		// Without it, stopping waits out the HTTP server's shutdown timeout,
		// which is --request-timeout (60 s) whenever a client still holds a
		// watch; with it, the server drains the short requests and gives
		// the rest 2 s. Lowering --request-timeout instead would also cut
		// short slow requests under load, which etcd's client then retries.
		"--shutdown-send-retry-after=true",
	}
	if opts.AuditLog {
		audit, err := cp.auditFlags()
		if err != nil {
			return cp, err
		}
		flags = append(flags, audit...)
	}
	server, err := kubeapiservertesting.StartTestServer(cp.tb,
		&kubeapiservertesting.TestServerInstanceOptions{EnableCertAuth: true, DisableInvariantChecks: true},
		flags, storage)
	if err != nil {
		return cp, fmt.Errorf("start kube-apiserver: %w", err)
	}
	cp.tb.Cleanup(server.TearDownFn)
	cp.AdminConfig = rest.CopyConfig(server.ClientConfig)
	cp.AdminConfig.QPS, cp.AdminConfig.Burst = -1, 0 // tests must not be throttled by the harness
	cp.Server = server.ClientConfig.Host
	if cp.Admin, err = kubernetes.NewForConfig(cp.AdminConfig); err != nil {
		return cp, err
	}
	if cp.ServerCA, err = servingCA(cp.Server); err != nil {
		return cp, err
	}
	if opts.ServeAddress != "" {
		if err := cp.serveOn(opts.ServeAddress); err != nil {
			return cp, err
		}
	}
	if !opts.NoRBACManifest {
		if err := cp.applyRBAC(cp.ctx); err != nil {
			return cp, err
		}
	}
	if err := cp.startDisruptionController(); err != nil {
		return cp, err
	}
	cp.startNodeLifecycle()
	cp.StartTime = time.Since(began)
	cp.logf("control plane ready at %s in %s", cp.Server, cp.StartTime.Round(time.Millisecond))
	return cp, nil
}

// Stop stops the hosts, the controllers, the API server and etcd, and
// removes the temporary files.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	hosts := make([]*SimHost, 0, len(cp.hosts))
	for _, h := range cp.hosts {
		hosts = append(hosts, h)
	}
	cp.mu.Unlock()
	for _, h := range hosts {
		h.Shutdown()
	}
	cp.cancel()
	cp.wg.Wait()
	func() {
		defer func() { _ = recover() }()
		cp.tb.cleanup()
	}()
	_ = os.RemoveAll(cp.Dir)
}

func (cp *ControlPlane) logf(format string, args ...any) {
	if cp.log != nil {
		fmt.Fprintf(cp.log, "cluster: "+format+"\n", args...)
	}
}

// go runs f until the control plane stops.
func (cp *ControlPlane) goRun(f func(ctx context.Context)) {
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		f(cp.ctx)
	}()
}

// quietKlog sends the API server's klog output to w (or nowhere).
func quietKlog(w io.Writer) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	_ = fs.Set("one_output", "true")
	if w == nil {
		w = io.Discard
	}
	klog.SetOutput(w)
}

func (cp *ControlPlane) startEtcd() (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(cp.Dir, "etcd")
	cfg.UnsafeNoFsync = true
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", fmt.Errorf("start etcd: %w", err)
	}
	cp.tb.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return "", errors.New("etcd did not become ready within a minute")
	}
	return client.String(), nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// servingCA returns the root of the certificate chain the server presents,
// for kubeconfigs that verify the server as a kubelet's does.
func servingCA(server string) ([]byte, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true}) // #nosec: reading the chain to trust it
	if err != nil {
		return nil, fmt.Errorf("read serving certificate: %w", err)
	}
	defer conn.Close()
	chain := conn.ConnectionState().PeerCertificates
	root := chain[len(chain)-1]
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw}), nil
}

// applyRBAC creates the objects of packaging/rbac.yaml, the manifest that
// `kured-host rbac` prints, so that tests prove it is enough.
func (cp *ControlPlane) applyRBAC(ctx context.Context) error {
	o, err := packaging.DecodeRBAC()
	if err != nil {
		return err
	}
	if _, err := cp.Admin.RbacV1().ClusterRoles().Create(ctx, &o.NodeReader, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("apply %s: %w", o.NodeReader.Name, err)
	}
	if _, err := cp.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &o.NodeReaderBinding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("apply %s: %w", o.NodeReaderBinding.Name, err)
	}
	if _, err := cp.Admin.RbacV1().Roles(o.Settings.Namespace).Create(ctx, &o.Settings, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("apply %s: %w", o.Settings.Name, err)
	}
	if _, err := cp.Admin.RbacV1().RoleBindings(o.SettingsBinding.Namespace).Create(ctx, &o.SettingsBinding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("apply %s: %w", o.SettingsBinding.Name, err)
	}
	// The RBAC authorizer reads from an informer: wait until it has the rule.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := cp.NodesCanListNodes(ctx)
		return err == nil && ok, nil
	})
}

// NodesCanListNodes asks the authorizer whether a node identity may list
// Nodes, which only kured-host's RBAC manifest grants.
func (cp *ControlPlane) NodesCanListNodes(ctx context.Context) (bool, error) {
	r, err := cp.Admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:node:probe", Groups: []string{"system:nodes", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"},
		}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("access review: %w", err)
	}
	return r.Status.Allowed, nil
}

// startDisruptionController runs the real PodDisruptionBudget controller,
// so that budgets get their status as in a cluster.
func (cp *ControlPlane) startDisruptionController() error {
	cfg := rest.CopyConfig(cp.AdminConfig)
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "disruption-controller"))
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	disc := cacheddiscovery.NewMemCacheClient(client.Discovery())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(disc)
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(client.Discovery()))
	if err != nil {
		return err
	}
	dc := disruption.NewDisruptionController(cp.ctx,
		factory.Core().V1().Pods(),
		factory.Policy().V1().PodDisruptionBudgets(),
		factory.Core().V1().ReplicationControllers(),
		factory.Apps().V1().ReplicaSets(),
		factory.Apps().V1().Deployments(),
		factory.Apps().V1().StatefulSets(),
		client, mapper, scales, client.Discovery())
	factory.Start(cp.ctx.Done())
	cp.goRun(func(ctx context.Context) { dc.Run(ctx, 1) })
	cp.goRun(func(ctx context.Context) {
		<-ctx.Done()
		factory.Shutdown()
	})
	return nil
}

// UserClient returns a client for user in groups, with a certificate from
// the harness's client CA.
func (cp *ControlPlane) UserClient(user string, groups []string) (kubernetes.Interface, error) {
	certPEM, keyPEM, err := cp.CA.ClientCert(user, groups, time.Hour)
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: cp.Server, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAData: cp.ServerCA, CertData: certPEM, KeyData: keyPEM}}
	return kubernetes.NewForConfig(cfg)
}

// WriteKubeconfig writes a kubeconfig for user in groups (a certificate
// from the harness's client CA, embedded) to path, for running a binary
// with that identity: groups system:masters make an admin.
func (cp *ControlPlane) WriteKubeconfig(path, user string, groups []string) error {
	certPEM, keyPEM, err := cp.CA.ClientCert(user, groups, time.Hour)
	if err != nil {
		return err
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: test
contexts:
- context:
    cluster: test
    user: user
  name: test
current-context: test
users:
- name: user
  user:
    client-certificate-data: %s
    client-key-data: %s
`, b64(cp.ServerCA), cp.Server, b64(certPEM), b64(keyPEM))
	return os.WriteFile(path, []byte(kc), 0o600)
}
