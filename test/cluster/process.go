package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
)

// A control plane in a process of its own (Options.OwnProcess) is the
// test binary run again with processEnv set: its TestMain calls
// ServeControlPlane first, which starts the control plane in that process
// and hands what the parent needs over in a file. In one process, the API
// server, etcd and a benchmark's hundreds of simulated hosts share one Go
// heap, and every request the API server answers waits out the garbage
// collections that the hosts' allocations cause; on a real cluster they
// run on other machines.
const processEnv = "KURED_HOST_CONTROL_PLANE"

// childSpec is what the parent tells the child (processEnv, JSON).
type childSpec struct {
	Dir            string // where the child writes handoffFile
	AuditLog       bool
	NoRBACManifest bool
	Log            bool // the child's logs to its stderr, which is the parent's log
}

const handoffFile = "control-plane.json"

// handoff is what the child tells the parent once its control plane is
// ready. The client CA's key travels with it: the parent mints the
// nodes' certificates.
type handoff struct {
	Server       string
	ServerCA     []byte
	CACert       []byte
	CAKey        []byte
	AdminHost    string
	AdminToken   string
	AdminCA      []byte
	AdminSNI     string
	AuditLogPath string
	StartTime    time.Duration
}

// ServeControlPlane is for the TestMain of a package whose tests start a
// control plane with Options.OwnProcess: called first, it does nothing
// and returns false, except in the process that Start started for the
// control plane, where it runs the control plane until the parent closes
// its standard input (or dies) and returns true; that TestMain then exits
// without running the tests, with status 1 if err is not nil.
func ServeControlPlane() (served bool, err error) {
	v, ok := os.LookupEnv(processEnv)
	if !ok {
		return false, nil
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		return true, fmt.Errorf("control plane process: %s: %w", processEnv, err)
	}
	opts := Options{AuditLog: spec.AuditLog, NoRBACManifest: spec.NoRBACManifest}
	if spec.Log {
		opts.Log = os.Stderr
	}
	cp, err := startHere(opts)
	if err != nil {
		return true, err
	}
	defer cp.Stop()
	caKey, err := x509.MarshalECPrivateKey(cp.CA.key)
	if err != nil {
		return true, err
	}
	h := handoff{
		Server: cp.Server, ServerCA: cp.ServerCA,
		CACert: cp.CA.PEM, CAKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: caKey}),
		AdminHost: cp.AdminConfig.Host, AdminToken: cp.AdminConfig.BearerToken,
		AdminCA: cp.AdminConfig.TLSClientConfig.CAData, AdminSNI: cp.AdminConfig.TLSClientConfig.ServerName,
		AuditLogPath: cp.AuditLogPath, StartTime: cp.StartTime,
	}
	b, err := json.Marshal(h)
	if err != nil {
		return true, err
	}
	// Renamed into place: the parent never reads half a file.
	tmp := filepath.Join(spec.Dir, handoffFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return true, err
	}
	if err := os.Rename(tmp, filepath.Join(spec.Dir, handoffFile)); err != nil {
		return true, err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return true, nil
}

// startProcess starts the control plane in a child process and fills cp
// from what the child hands over.
func (cp *ControlPlane) startProcess(opts Options) error {
	if _, ok := os.LookupEnv(processEnv); ok {
		return errors.New("start control plane: this is the control plane's own process; its TestMain must call cluster.ServeControlPlane first")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start control plane process: %w", err)
	}
	spec, err := json.Marshal(childSpec{Dir: cp.Dir, AuditLog: opts.AuditLog, NoRBACManifest: opts.NoRBACManifest, Log: opts.Log != nil})
	if err != nil {
		return err
	}
	// -test.run matches no test: should the TestMain not serve, the
	// child runs nothing and exits, and the wait below says why.
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), processEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the parent
	var stderr tail
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	if opts.Log != nil {
		cmd.Stderr = io.MultiWriter(opts.Log, &stderr)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start control plane process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	cp.Pid = cmd.Process.Pid
	cp.tb.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	path := filepath.Join(cp.Dir, handoffFile)
	deadline := time.After(5 * time.Minute)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return cp.takeOver(b)
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return fmt.Errorf("control plane process exited before it was ready (%v): %s", err, stderr.String())
		case <-deadline:
			return fmt.Errorf("control plane process not ready within 5 minutes: %s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// takeOver fills cp from the child's handoff.
func (cp *ControlPlane) takeOver(b []byte) error {
	var h handoff
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("control plane process: %s: %w", handoffFile, err)
	}
	ca, err := parseCA(h.CACert, h.CAKey)
	if err != nil {
		return fmt.Errorf("control plane process: %w", err)
	}
	cp.CA, cp.Server, cp.ServerCA, cp.AuditLogPath, cp.StartTime = ca, h.Server, h.ServerCA, h.AuditLogPath, h.StartTime
	cp.AdminConfig = &rest.Config{Host: h.AdminHost, BearerToken: h.AdminToken, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: h.AdminCA, ServerName: h.AdminSNI}}
	cp.Admin, err = kubernetes.NewForConfig(cp.AdminConfig)
	return err
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("client CA: no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("client CA key: %w", err)
	}
	return &CA{cert: cert, key: key, PEM: certPEM}, nil
}

// tail keeps the last 4 KiB written to it: the child's last words. The
// child's stderr is copied in while a timed-out start reads it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Metrics returns the API server's metric families of the given names:
// from this process's registry, or, with the control plane in its own
// process, from its /metrics, of which only the lines of those families
// are parsed.
func (cp *ControlPlane) Metrics(ctx context.Context, names ...string) (map[string]*dto.MetricFamily, error) {
	out := map[string]*dto.MetricFamily{}
	if cp.Pid == 0 {
		mfs, err := legacyregistry.DefaultGatherer.Gather()
		if err != nil {
			return nil, fmt.Errorf("gather the API server's metrics: %w", err)
		}
		for _, mf := range mfs {
			for _, n := range names {
				if mf.GetName() == n {
					out[n] = mf
				}
			}
		}
		return out, nil
	}
	body, err := cp.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's /metrics: %w", err)
	}
	var keep bytes.Buffer
	s := bufio.NewScanner(bytes.NewReader(body))
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		for _, n := range names {
			if strings.HasPrefix(name, n) {
				keep.WriteString(line)
				keep.WriteByte('\n')
				break
			}
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(&keep)
	if err != nil {
		return nil, fmt.Errorf("parse the API server's /metrics: %w", err)
	}
	for _, n := range names {
		if mf, ok := mfs[n]; ok {
			// The text has the +Inf bucket, which a registry's
			// histograms leave implicit (the sample count): the same
			// shape either way.
			for _, m := range mf.GetMetric() {
				if h := m.GetHistogram(); h != nil {
					h.Bucket = slices.DeleteFunc(h.Bucket, func(b *dto.Bucket) bool { return math.IsInf(b.GetUpperBound(), 1) })
				}
			}
			out[n] = mf
		}
	}
	return out, nil
}

// ProcessCPU is the CPU time the control plane's own process has used
// (user and system), 0 when it runs in this one.
func (cp *ControlPlane) ProcessCPU() time.Duration {
	if cp.Pid == 0 {
		return 0
	}
	d, _ := CPUTime(cp.Pid) // gone: nothing more to count
	return d
}

// CPUTime is the user and system time process pid has used, from
// /proc/PID/stat.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name, which is in parentheses and
	// may hold spaces: utime and stime are the 14th and 15th of the line.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	const ticks = 100 // USER_HZ, which Linux fixes at 100 for /proc
	return time.Duration(utime+stime) * time.Second / ticks, nil
}
