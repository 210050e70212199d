package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"

	"github.com/kured-host/kured-host/daemon/host"
)

// KnownPaths are where distributions keep the kubelet's kubeconfig.
var KnownPaths = []string{
	"/etc/kubernetes/kubelet.conf",                   // kubeadm
	"/var/lib/kubelet/kubeconfig",                    // EKS, GKE, AKS, kops
	"/var/lib/rancher/k3s/agent/kubelet.kubeconfig",  // k3s
	"/var/lib/rancher/rke2/agent/kubelet.kubeconfig", // RKE2
	"/var/lib/k0s/kubelet.conf",                      // k0s
}

// KubeletUnits are the systemd units a kubelet runs in: kubeadm's (and
// most distributions') kubelet.service, and the services of RKE2 and k0s,
// whose kubelet is a child process in their control group. k3s runs its
// kubelet inside its own process, with no --kubeconfig to read: its known
// path finds it.
var KubeletUnits = []string{"kubelet.service", "rke2-agent.service", "rke2-server.service", "k0sworker.service", "k0scontroller.service"}

// ErrNoKubeconfig means no kubeconfig was found.
var ErrNoKubeconfig = errors.New("no kubelet kubeconfig found")

// Trust is where a kubeconfig comes from, which decides what kured-host
// accepts in it. client-go runs a kubeconfig's credential plugin (exec or
// auth-provider) as whoever loads it, root here: whoever can write the
// kubeconfig can run code as root.
type Trust int

const (
	// Discovered: found by kured-host. The file and every directory on
	// its way must be writable by root alone, and it may not name a
	// credential plugin.
	Discovered Trust = iota
	// Configured: named in kubernetes.kubeconfig, by whoever may write
	// the configuration (root). The same check of who may write it; a
	// credential plugin is allowed (EKS nodes use one).
	Configured
	// Given: --kubeconfig on the command line of check or status, the
	// user's own choice, used as it is, as kubectl would.
	Given
)

// Kubeconfig is the kubeconfig to connect with.
type Kubeconfig struct {
	Path  string // the file read, under the root
	How   string // how it was found, for the log and check
	Trust Trust
	// Root is where the host's paths named in the file are: a kubelet
	// kubeconfig names the kubelet's certificate by its path on the host.
	Root host.Root
}

// ProcessLister lists the processes of a systemd unit (host.Units).
type ProcessLister interface {
	Processes(ctx context.Context, unit string) ([]host.UnitProcess, error)
}

// Find returns the kubeconfig to use: the configured path, else the
// --kubeconfig argument of the kubelet that systemd runs (units may be
// nil: not asked), else the first known path that exists, all under root.
// It never picks a kubelet from /proc by its name, which any local user
// can give a process of theirs. A kubeconfig that anyone but root (or the
// user running kured-host) could have written is refused, with why.
func Find(ctx context.Context, root host.Root, configured string, units ProcessLister) (Kubeconfig, error) {
	if configured != "" {
		k, err := checked(root, configured, Configured, "configured (kubernetes.kubeconfig)")
		if err != nil {
			return Kubeconfig{}, fmt.Errorf("kubernetes.kubeconfig: %w", err)
		}
		return k, nil
	}
	var asked string
	if units != nil {
		arg, how, err := kubeletArg(ctx, units)
		switch {
		case err != nil:
			asked = fmt.Sprintf("; systemd was not asked: %v", err)
		case arg != "":
			if _, err := root.Resolve(arg, nil); err == nil {
				return checked(root, arg, Discovered, how)
			}
			// A kubelet that has not finished its TLS bootstrap has
			// no kubeconfig yet.
			asked = fmt.Sprintf("; %s names %s, which does not exist", how, arg)
		}
	}
	for _, p := range KnownPaths {
		if _, err := root.Resolve(p, nil); err == nil {
			return checked(root, p, Discovered, "known path")
		}
	}
	return Kubeconfig{}, fmt.Errorf("%w: no kubelet with --kubeconfig in %s%s, and none of %s exists; set kubernetes.kubeconfig",
		ErrNoKubeconfig, strings.Join(KubeletUnits, ", "), asked, strings.Join(KnownPaths, ", "))
}

// kubeletArg asks systemd for the kubelet in KubeletUnits and returns its
// --kubeconfig argument. An error means systemd could not be asked.
func kubeletArg(ctx context.Context, units ProcessLister) (arg, how string, err error) {
	for _, unit := range KubeletUnits {
		procs, err := units.Processes(ctx, unit)
		if err != nil {
			return "", "", err
		}
		for _, p := range procs {
			if arg := KubeletKubeconfig(p.Argv); filepath.IsAbs(arg) {
				return arg, fmt.Sprintf("the --kubeconfig of the kubelet in %s (pid %d)", unit, p.PID), nil
			}
		}
	}
	return "", "", nil
}

// KubeletKubeconfig returns the --kubeconfig argument of a kubelet command
// line, or "" if argv is not a kubelet's.
func KubeletKubeconfig(argv []string) string {
	if len(argv) == 0 || filepath.Base(argv[0]) != "kubelet" {
		return ""
	}
	for i, a := range argv[1:] {
		switch {
		case strings.HasPrefix(a, "--kubeconfig="):
			return strings.TrimPrefix(a, "--kubeconfig=")
		case a == "--kubeconfig" && i+2 < len(argv):
			return argv[i+2]
		}
	}
	return ""
}

// checked finds the host's path p under root and accepts it if only root
// (or this user) could have written it or any directory on its way.
func checked(root host.Root, p string, trust Trust, how string) (Kubeconfig, error) {
	full, err := root.Resolve(p, host.OnlyWritableBy(os.Geteuid()))
	switch {
	case errors.Is(err, host.ErrUntrusted):
		return Kubeconfig{}, fmt.Errorf("kubeconfig %s (%s) refused: %w; kured-host runs as root and acts on what the file says: "+
			"make the file and its directories writable by root alone", root.Path(p), how, err)
	case err != nil:
		return Kubeconfig{}, fmt.Errorf("kubeconfig %s (%s): %w", root.Path(p), how, err)
	}
	return Kubeconfig{Path: full, How: how, Trust: trust, Root: root}, nil
}

// GivenKubeconfig is a kubeconfig given on the command line, used as it is.
func GivenKubeconfig(path string) (Kubeconfig, error) {
	if _, err := os.Stat(path); err != nil {
		return Kubeconfig{}, fmt.Errorf("--kubeconfig: %w", err)
	}
	return Kubeconfig{Path: path, How: "given with --kubeconfig", Trust: Given}, nil
}

// Rest loads the kubeconfig. Client certificates given as files are read
// again when they change, so the kubelet's certificate rotation is
// followed.
func (k Kubeconfig) Rest(userAgent string, clock *ServerClock) (*rest.Config, error) {
	raw, err := clientcmd.LoadFromFile(k.Path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", k.Path, err)
	}
	if k.Trust == Discovered {
		if err := noPlugins(raw); err != nil {
			return nil, fmt.Errorf("kubeconfig %s (%s) refused: %w", k.Path, k.How, err)
		}
	}
	var cert *rootCert
	if k.underRoot() {
		if cert, err = k.hostPaths(raw); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", k.Path, err)
		}
	} else if err := clientcmd.ResolveLocalPaths(raw); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", k.Path, err)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", k.Path, err)
	}
	// Both before the certificate's transport, which is built from
	// cfg's settings as they are then and dials through the
	// reconnecting dialer.
	Tune(cfg)
	newReconnecting().install(cfg)
	if cert != nil {
		if err := cert.install(cfg); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", k.Path, err)
		}
	}
	cfg.UserAgent = userAgent
	if clock != nil {
		cfg.Wrap(clock.Wrap)
	}
	return cfg, nil
}

// noPlugins refuses credential plugins, which client-go would run as root
// with the kubeconfig's arguments.
func noPlugins(c *clientcmdapi.Config) error {
	for _, name := range slices.Sorted(maps.Keys(c.AuthInfos)) {
		a := c.AuthInfos[name]
		what := ""
		switch {
		case a.Exec != nil:
			what = fmt.Sprintf("runs the credential plugin %q (exec)", a.Exec.Command)
		case a.AuthProvider != nil:
			what = fmt.Sprintf("uses the auth provider %q", a.AuthProvider.Name)
		default:
			continue
		}
		return fmt.Errorf("its user %q %s, which kured-host would run as root; it runs one only from a kubeconfig "+
			"named in kubernetes.kubeconfig (on EKS: kubernetes.kubeconfig = \"/var/lib/kubelet/kubeconfig\")", name, what)
	}
	return nil
}

func (k Kubeconfig) underRoot() bool { return k.Root != "" && k.Root != "/" }

// hostPaths points the files the kubeconfig in use names at the host's
// files under the root: the CA and a token file as they are now, the
// client certificate and key each time they are read, so that the
// kubelet's rotation (a new file, then the symbolic link to it) is
// followed. client-go would read an absolute path outside the root, and
// follow the kubelet's absolute link out of it.
func (k Kubeconfig) hostPaths(raw *clientcmdapi.Config) (*rootCert, error) {
	ctx, ok := raw.Contexts[raw.CurrentContext]
	if !ok {
		return nil, nil // ClientConfig says what is missing
	}
	dir := "/" + filepath.Dir(strings.TrimPrefix(k.Path, string(k.Root)))
	onHost := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	now := func(p *string) error {
		if *p == "" {
			return nil
		}
		full, err := k.Root.Resolve(onHost(*p), nil)
		if err != nil {
			return err
		}
		*p = full
		return nil
	}
	if c := raw.Clusters[ctx.Cluster]; c != nil {
		if err := now(&c.CertificateAuthority); err != nil {
			return nil, err
		}
	}
	a := raw.AuthInfos[ctx.AuthInfo]
	if a == nil {
		return nil, nil
	}
	if err := now(&a.TokenFile); err != nil {
		return nil, err
	}
	if a.ClientCertificate == "" && a.ClientKey == "" {
		return nil, nil
	}
	cert := &rootCert{root: k.Root, cert: onHost(a.ClientCertificate), key: onHost(a.ClientKey)}
	if _, err := cert.load(); err != nil {
		return nil, err
	}
	a.ClientCertificate, a.ClientKey = "", ""
	return cert, nil
}

// rootCert is a client certificate and key under a root, found again at
// each TLS handshake.
type rootCert struct {
	root      host.Root
	cert, key string // host paths
}

func (r *rootCert) load() (*tls.Certificate, error) {
	cert, err := r.root.Resolve(r.cert, nil)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	key, err := r.root.Resolve(r.key, nil)
	if err != nil {
		return nil, fmt.Errorf("client key: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s: %w", cert, err)
	}
	return &pair, nil
}

// install gives cfg a transport with the certificate callback: rest.Config
// has no field for one, so the transport is built here from cfg's own TLS
// settings, and cfg adds its user agent and wrappers on top as usual.
func (r *rootCert) install(cfg *rest.Config) error {
	tc, err := cfg.TransportConfig()
	if err != nil {
		return err
	}
	tc.TLS.GetCertHolder = &transport.GetCertHolder{GetCert: r.load}
	// Only the TLS transport: cfg applies the rest when it is used.
	tc.UserAgent, tc.BearerToken, tc.BearerTokenFile, tc.Username, tc.Password = "", "", "", "", ""
	tc.Impersonate, tc.WrapTransport = transport.ImpersonationConfig{}, nil
	rt, err := transport.New(tc)
	if err != nil {
		return err
	}
	cfg.Transport = rt
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	return nil
}
