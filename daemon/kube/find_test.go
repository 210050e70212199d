package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/host/logindtest"
)

func TestKubeletKubeconfig(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf"}, "/etc/kubernetes/kubelet.conf"},
		{[]string{"kubelet", "--kubeconfig", "/var/lib/kubelet/kubeconfig", "--v=2"}, "/var/lib/kubelet/kubeconfig"},
		{[]string{"/usr/bin/kubelet", "--v=2"}, ""},
		{[]string{"/usr/bin/kubelet", "--kubeconfig"}, ""},
		{[]string{"/usr/bin/containerd", "--kubeconfig=/x"}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := KubeletKubeconfig(tt.argv); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.argv, got, tt.want)
		}
	}
}

// write creates root/p with mode (and its directories 0755).
func write(t *testing.T, root, p, body string, mode fs.FileMode) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(full, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, root, p string, mode fs.FileMode) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(full, mode); err != nil {
		t.Fatal(err)
	}
}

// systemd starts a private bus with a systemd stand-in on it.
func systemd(t *testing.T) (*logindtest.Systemd, host.Units) {
	t.Helper()
	sd := logindtest.StartSystemd(t)
	return sd, host.Units{Address: sd.Address}
}

// apiServer answers /version on loopback and records the bearer token
// of each request.
func apiServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var tokens []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tokens = append(tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), tokens...)
	}
}

// serverCA is the certificate-authority-data of a test server
// (client-go sends credentials over TLS only).
func serverCA(srv *httptest.Server) string {
	if srv == nil || srv.Certificate() == nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

// kubeconfig is a kubeconfig for srv whose one user is user (YAML, at
// the user's indentation).
func kubeconfig(srv *httptest.Server, user string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority-data: %q}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user:
%s`, srv.URL, serverCA(srv), user)
}

func tokenKubeconfig(srv *httptest.Server, token string) string {
	return kubeconfig(srv, fmt.Sprintf("    token: %q\n", token))
}

// execKubeconfig runs a credential plugin that records who ran it in
// marker.
func execKubeconfig(srv *httptest.Server, marker string) string {
	return kubeconfig(srv, fmt.Sprintf(`    exec:
      apiVersion: client.authentication.k8s.io/v1
      interactiveMode: Never
      command: /bin/sh
      args:
      - -c
      - 'id > %s; echo "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"plugin\"}}"'
`, marker))
}

// ask connects with k and makes one request.
func ask(t *testing.T, k Kubeconfig) error {
	t.Helper()
	cfg, err := k.Rest("kured-host-test", nil)
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = client.Discovery().ServerVersion()
	return err
}

// TestSpoofedKubelet is the attack of issue 22 on a fixture host: a local
// user runs `exec -a kubelet sleep` (PID 10001, which sorts before the
// real kubelet's 812) with --kubeconfig naming a file of theirs in a
// world-writable directory, whose exec plugin client-go would run as
// root. Discovery asks systemd which kubelet it runs and never takes one
// from /proc by its name; and the attacker's file would be refused anyway.
func TestSpoofedKubelet(t *testing.T) {
	srv, tokens := apiServer(t)
	root := t.TempDir()
	marker := filepath.Join(t.TempDir(), "plugin-ran")
	mkdir(t, root, "/tmp", 0o777|fs.ModeSticky)
	mkdir(t, root, "/tmp/evil", 0o777)
	write(t, root, "/tmp/evil/kubeconfig", execKubeconfig(srv, marker), 0o666)
	write(t, root, "/proc/10001/cmdline", "kubelet\x00--kubeconfig=/tmp/evil/kubeconfig\x00", 0o444)
	write(t, root, "/proc/812/cmdline", "/usr/bin/kubelet\x00--kubeconfig=/etc/kubernetes/kubelet.conf\x00", 0o444)
	write(t, root, "/etc/kubernetes/kubelet.conf", tokenKubeconfig(srv, "the-node"), 0o600)
	sd, units := systemd(t)
	sd.SetUnit("kubelet.service", logindtest.Process{
		Cgroup: "/system.slice/kubelet.service", PID: 812,
		Cmdline: "/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml --kubeconfig=/etc/kubernetes/kubelet.conf",
	})
	ctx := context.Background()
	ran := func() bool { _, err := os.Stat(marker); return err == nil }

	t.Run("the kubelet systemd runs is the one used", func(t *testing.T) {
		k, err := Find(ctx, host.Root(root), "", units)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(root, "/etc/kubernetes/kubelet.conf"); k.Path != want || !strings.Contains(k.How, "kubelet.service (pid 812)") {
			t.Errorf("found %s (%s), want %s from kubelet.service", k.Path, k.How, want)
		}
		if err := ask(t, k); err != nil {
			t.Fatal(err)
		}
		if got := tokens(); len(got) != 1 || got[0] != "the-node" || ran() {
			t.Errorf("requests with %q, plugin ran: %v; want the node's token only", got, ran())
		}
	})
	t.Run("without systemd's answer, /proc is not read", func(t *testing.T) {
		sd.SetUnit("kubelet.service") // loaded, not running
		defer sd.SetUnit("kubelet.service", logindtest.Process{PID: 812, Cmdline: "/usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf"})
		bare := t.TempDir()
		for _, f := range []string{"/proc/10001/cmdline", "/tmp/evil/kubeconfig"} {
			b, _ := os.ReadFile(filepath.Join(root, f))
			write(t, bare, f, string(b), 0o666)
		}
		_, err := Find(ctx, host.Root(bare), "", units)
		if !errors.Is(err, ErrNoKubeconfig) {
			t.Errorf("got %v, want %v", err, ErrNoKubeconfig)
		}
	})
	t.Run("the attacker's file, if named, is refused", func(t *testing.T) {
		_, err := Find(ctx, host.Root(root), "/tmp/evil/kubeconfig", units)
		if !errors.Is(err, host.ErrUntrusted) || !strings.Contains(err.Error(), "may be written by its group or others") {
			t.Errorf("got %v, want it refused as writable by others", err)
		}
	})
	if ran() {
		t.Fatal("the attacker's credential plugin ran")
	}
	// The control: the same plugin in a file an admin named, which only
	// root can write, runs; so the marker would have shown the attack.
	write(t, root, "/etc/kubernetes/with-plugin.conf", execKubeconfig(srv, marker), 0o600)
	k, err := Find(ctx, host.Root(root), "/etc/kubernetes/with-plugin.conf", units)
	if err != nil {
		t.Fatal(err)
	}
	if err := ask(t, k); err != nil {
		t.Fatal(err)
	}
	if !ran() {
		t.Error("the configured kubeconfig's plugin did not run: the test cannot see a plugin run")
	}
}

// TestFindOrder: the configured path, then systemd's kubelet, then the
// known paths in order; none is an error that says what to set.
func TestFindOrder(t *testing.T) {
	ctx := context.Background()
	sd, units := systemd(t)
	root := t.TempDir()
	write(t, root, "/var/lib/rancher/k3s/agent/kubelet.kubeconfig", "x", 0o600)
	write(t, root, "/var/lib/k0s/kubelet.conf", "x", 0o600)
	write(t, root, "/opt/kubelet/kc", "x", 0o600)
	write(t, root, "/srv/kc", "x", 0o600)

	check := func(name, configured, wantPath, wantHow string) {
		t.Helper()
		k, err := Find(ctx, host.Root(root), configured, units)
		if err != nil || k.Path != filepath.Join(root, wantPath) || !strings.Contains(k.How, wantHow) {
			t.Errorf("%s: got %s (%s), %v; want %s (%s)", name, k.Path, k.How, err, wantPath, wantHow)
		}
	}
	check("known paths in order", "", "/var/lib/rancher/k3s/agent/kubelet.kubeconfig", "known path")
	sd.SetUnit("k0sworker.service",
		logindtest.Process{PID: 40, Cmdline: "/usr/local/bin/k0s worker"},
		logindtest.Process{PID: 41, Cmdline: `/var/lib/k0s/bin/kubelet "--kubeconfig=/opt/kubelet/kc" --v=2`})
	check("a kubelet in a unit's control group", "", "/opt/kubelet/kc", "k0sworker.service (pid 41)")
	check("configured", "/srv/kc", "/srv/kc", "configured")

	sd.SetUnit("k0sworker.service")
	if _, err := Find(ctx, host.Root(t.TempDir()), "", units); !errors.Is(err, ErrNoKubeconfig) || !strings.Contains(err.Error(), "set kubernetes.kubeconfig") {
		t.Errorf("none: got %v", err)
	}
	if _, err := Find(ctx, host.Root(root), "/srv/missing", units); err == nil || !strings.Contains(err.Error(), "kubernetes.kubeconfig") {
		t.Errorf("a missing configured kubeconfig: got %v", err)
	}
	// No bus: known paths still work, and the error says systemd was not
	// asked.
	noBus := host.Units{Address: "unix:path=" + filepath.Join(t.TempDir(), "none")}
	k, err := Find(ctx, host.Root(root), "", noBus)
	if err != nil || !strings.HasSuffix(k.Path, "k3s/agent/kubelet.kubeconfig") {
		t.Errorf("no bus: got %s, %v", k.Path, err)
	}
	if _, err := Find(ctx, host.Root(t.TempDir()), "", noBus); err == nil || !strings.Contains(err.Error(), "systemd was not asked") {
		t.Errorf("no bus, nothing found: got %v", err)
	}
}

// TestFindRefusesWritable: a kubeconfig that anyone but root could have
// written, or that sits in such a directory, is refused with the path and
// the reason.
func TestFindRefusesWritable(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, root string)
		refused string // "" when accepted
	}{
		{"root's file in root's directory", func(t *testing.T, root string) {}, ""},
		{"file writable by others", func(t *testing.T, root string) {
			must(t, os.Chmod(filepath.Join(root, "etc/kubernetes/kubelet.conf"), 0o666))
		}, "kubelet.conf: the file may be written by its group or others (mode 0666)"},
		{"file writable by its group", func(t *testing.T, root string) {
			must(t, os.Chmod(filepath.Join(root, "etc/kubernetes/kubelet.conf"), 0o620))
		}, "(mode 0620)"},
		{"directory writable by others", func(t *testing.T, root string) {
			must(t, os.Chmod(filepath.Join(root, "etc/kubernetes"), 0o777))
		}, "etc/kubernetes: the directory may be written by its group or others (mode 0777)"},
		{"sticky directory such as /tmp", func(t *testing.T, root string) {
			must(t, os.Chmod(filepath.Join(root, "etc"), 0o777|fs.ModeSticky))
		}, "(mode 1777)"},
		{"through a link in a directory others may write", func(t *testing.T, root string) {
			must(t, os.Rename(filepath.Join(root, "etc/kubernetes"), filepath.Join(root, "srv")))
			mkdir(t, root, "/opt/open", 0o777)
			must(t, os.Symlink("/srv", filepath.Join(root, "opt/open/k8s")))
			must(t, os.Symlink("/opt/open/k8s", filepath.Join(root, "etc/kubernetes")))
		}, "opt/open: the directory may be written by its group or others"},
		{"owned by another user", func(t *testing.T, root string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the file away")
			}
			must(t, os.Chown(filepath.Join(root, "etc/kubernetes/kubelet.conf"), 1000, 1000))
		}, "the file belongs to uid 1000, not root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "/etc/kubernetes/kubelet.conf", "x", 0o600)
			tt.prepare(t, root)
			_, err := Find(context.Background(), host.Root(root), "", nil)
			switch {
			case tt.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.refused != "" && (!errors.Is(err, host.ErrUntrusted) || !strings.Contains(err.Error(), tt.refused)):
				t.Errorf("got %v, want refused with %q", err, tt.refused)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPluginsOnlyWhenConfigured: a discovered kubeconfig may not name a
// credential plugin; one named in kubernetes.kubeconfig may (EKS), and
// one given on the command line is the user's own.
func TestPluginsOnlyWhenConfigured(t *testing.T) {
	unused := &httptest.Server{URL: "https://127.0.0.1:1"}
	provider := kubeconfig(unused, "    auth-provider: {name: oidc}\n")
	plugin := execKubeconfig(unused, "/nonexistent")
	for _, tc := range []struct {
		name, body string
		trust      Trust
		refused    string
	}{
		{"discovered with exec", plugin, Discovered, `its user "u" runs the credential plugin "/bin/sh" (exec)`},
		{"discovered with an auth provider", provider, Discovered, `its user "u" uses the auth provider "oidc"`},
		{"configured with exec", plugin, Configured, ""},
		{"given with exec", plugin, Given, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kubeconfig")
			must(t, os.WriteFile(path, []byte(tc.body), 0o600))
			_, err := Kubeconfig{Path: path, How: "test", Trust: tc.trust}.Rest("test", nil)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "kubernetes.kubeconfig")):
				t.Errorf("got %v, want refused with %q and how to allow it", err, tc.refused)
			}
		})
	}
}

// TestHostRootCertificates: under --host-root, the files a kubelet
// kubeconfig names by their host paths are read under the root, the
// kubelet's absolute link to its current certificate is followed inside
// the root, and a rotation (a new file, then the link) is followed.
func TestHostRootCertificates(t *testing.T) {
	ca := newCA(t)
	var mu sync.Mutex
	var seen, encodings []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.TLS.PeerCertificates[0].Subject.CommonName)
		encodings = append(encodings, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37"}`)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool, Certificates: []tls.Certificate{ca.serving(t)}}
	srv.StartTLS()
	defer srv.Close()

	root := t.TempDir()
	write(t, root, "/etc/kubernetes/pki/ca.crt", string(ca.certPEM), 0o644)
	write(t, root, "/var/lib/kubelet/pki/kubelet-client-1.pem", string(ca.client(t, "system:node:one")), 0o600)
	must(t, os.Symlink("/var/lib/kubelet/pki/kubelet-client-1.pem", filepath.Join(root, "var/lib/kubelet/pki/kubelet-client-current.pem")))
	write(t, root, "/etc/kubernetes/kubelet.conf", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority: /etc/kubernetes/pki/ca.crt}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`, srv.URL), 0o600)

	k, err := Find(context.Background(), host.Root(root), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ask(t, k); err != nil {
		t.Fatal(err)
	}
	// The kubelet rotates: a new file, then the link, both absolute.
	write(t, root, "/var/lib/kubelet/pki/kubelet-client-2.pem", string(ca.client(t, "system:node:two")), 0o600)
	link := filepath.Join(root, "var/lib/kubelet/pki/kubelet-client-current.pem")
	must(t, os.Symlink("/var/lib/kubelet/pki/kubelet-client-2.pem", link+".tmp"))
	must(t, os.Rename(link+".tmp", link))
	srv.CloseClientConnections() // the next request makes a new handshake
	if err := ask(t, k); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "system:node:one" || seen[1] != "system:node:two" {
		t.Errorf("client certificates seen %q, want the first, then the rotated one", seen)
	}
	// Tune's settings reach the certificate's own transport: no gzip
	// asked of the API server.
	for _, e := range encodings {
		if strings.Contains(e, "gzip") {
			t.Errorf("request sent Accept-Encoding %q: compression is not disabled on the host certificate's transport", e)
		}
	}
}

type testCA struct {
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	certPEM []byte
	pool    *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{key: key, cert: cert, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: pool}
}

// issue returns a certificate and key, PEM, signed by the CA.
func (ca *testCA) issue(t *testing.T, tmpl *x509.Certificate) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl.SerialNumber, _ = rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	must(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})...)
}

func (ca *testCA) client(t *testing.T, cn string) []byte {
	return ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *testCA) serving(t *testing.T) tls.Certificate {
	b := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pair, err := tls.X509KeyPair(b, b)
	must(t, err)
	return pair
}

// TestUnauthorizedReconnects: the kubelet has rotated its certificate and
// the API server now refuses the old one (expired) on the connection the
// daemon keeps open. The 401 makes the daemon drop its connections, and
// the next request presents the new certificate.
func TestUnauthorizedReconnects(t *testing.T) {
	ca := newCA(t)
	var mu sync.Mutex
	var seen []string
	refuseOld := false
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		mu.Lock()
		seen = append(seen, cn)
		refuse := refuseOld && cn == "system:node:old"
		mu.Unlock()
		if refuse {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37"}`)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool, Certificates: []tls.Certificate{ca.serving(t)}}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	certPath := filepath.Join(dir, "kubelet-client-current.pem")
	must(t, os.WriteFile(certPath, ca.client(t, "system:node:old"), 0o600))
	kc := filepath.Join(dir, "kubelet.conf")
	must(t, os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority-data: %q}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user: {client-certificate: %s, client-key: %s}
`, srv.URL, base64.StdEncoding.EncodeToString(ca.certPEM), certPath, certPath)), 0o600))
	cfg, err := Kubeconfig{Path: kc, Trust: Given}.Rest("test", nil)
	must(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	version := func() error { _, err := client.Discovery().ServerVersion(); return err }

	must(t, version())
	// The kubelet rotates; the old certificate expires. (client-go reads
	// the files at most once a second.)
	must(t, os.WriteFile(certPath, ca.client(t, "system:node:new"), 0o600))
	time.Sleep(1100 * time.Millisecond)
	mu.Lock()
	refuseOld = true
	mu.Unlock()
	if err := version(); err == nil {
		t.Fatal("the old certificate on the kept connection was not refused: the test proves nothing")
	}
	if err := version(); err != nil {
		t.Fatalf("after a 401, the next request still fails: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != "system:node:old" || seen[1] != "system:node:old" || seen[2] != "system:node:new" {
		t.Errorf("certificates seen %q, want old, old (refused), then new", seen)
	}
}
