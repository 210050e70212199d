package vmtest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The real kubelet in the VM (startRealKubeletVM): built from the same
// k8s.io/kubernetes module as the harness's API server (test/cluster's
// go.mod, `tool k8s.io/kubernetes/cmd/kubelet`), so that one build cache
// serves both, and set up as kubeadm sets up a node: the unit's
// kubeadm-flags.env and /var/lib/kubelet/config.yaml, the node's client
// certificate at kubeadm's paths, containerd with the systemd cgroup
// driver on cgroup v2. No registry is reachable: the pause image and the
// workload's image are OCI archives written here and imported by the
// guest's provisioning (kured-host-vm-guest provision).

// pauseImage is the sandbox image: containerd's sandbox_image in the
// image's /etc/containerd/config.toml names it.
const (
	pauseImage    = "registry.k8s.io/pause:3.10"
	workloadImage = "kured-host.test/workload:1"
)

// kubeletConfig is the KubeletConfiguration: graceful node shutdown on
// (shutdownGracePeriod, of which shutdownGracePeriodCriticalPods for the
// critical pods), the systemd cgroup driver, containerd's socket. No
// webhook authentication or authorization (the API server never calls
// this kubelet), no DNS (the VM has none), eviction thresholds and image
// garbage collection out of the way of a 2 GB disk. The shutdown
// manager's own lines (verbosity 1) reach the journal, and so the serial
// console.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
shutdownGracePeriod: 40s
shutdownGracePeriodCriticalPods: 10s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
resolvConf: ""
rotateCertificates: false
evictionHard:
  memory.available: 20Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
logging:
  vmodule:
  - filePattern: "nodeshutdown_manager*"
    verbosity: 1
`

// kubeadmFlags is what kubeadm writes to /var/lib/kubelet/kubeadm-flags.env
// and the unit passes to the kubelet, with the node's address on the
// test's network (the kubelet would otherwise pick none: no default
// route).
const kubeadmFlags = `KUBELET_KUBEADM_ARGS="--config=/var/lib/kubelet/config.yaml --node-ip=` + guestIP + `"` + "\n"

// buildKubelet builds the kubelet into run, stamped with the module's
// version (what the Node then reports as its kubeletVersion).
func buildKubelet(run string) error {
	v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes").Output()
	if err != nil {
		return fmt.Errorf("the version of k8s.io/kubernetes: %w", err)
	}
	version := strings.TrimSpace(string(v))
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("the version of k8s.io/kubernetes: %q", version)
	}
	const pkg = "k8s.io/component-base/version"
	ldflags := fmt.Sprintf("-s -w -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
		pkg, version, parts[0], parts[1])
	began := time.Now()
	// CGO_ENABLED=1 as the harness: the same build cache. The guest runs
	// the same Debian release as this machine, so its C library fits.
	build := exec.Command("go", "build", "-ldflags="+ldflags, "-o", filepath.Join(run, "kubelet"), "k8s.io/kubernetes/cmd/kubelet")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the kubelet: %v\n%s", err, out)
	}
	fmt.Printf("vmtest: kubelet %s built in %s\n", version, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// writeImages writes the OCI archives the guest imports into
// containerd: the sandbox's pause image and the workload's, both the
// static guest program (its pause and workload commands) in one layer.
func writeImages(dir, program string) error {
	prog, err := os.ReadFile(program)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file, img := range map[string]struct {
		name string
		cmd  string
	}{
		"pause.tar":    {pauseImage, "pause"},
		"workload.tar": {workloadImage, "workload"},
	} {
		b, err := ociArchive(img.name, []string{"/kured-host-vm-guest", img.cmd}, prog)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ociArchive is an OCI image layout in a tar, as `ctr images import`
// reads it: one linux/amd64 image of one uncompressed layer holding the
// program at /kured-host-vm-guest, named by the index's
// io.containerd.image.name annotation.
func ociArchive(name string, entrypoint []string, program []byte) ([]byte, error) {
	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Platform    map[string]string `json:"platform,omitempty"`
	}
	blobs := map[string][]byte{}
	blob := func(mediaType string, b []byte) descriptor {
		sum := sha256.Sum256(b)
		d := descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(b)}
		blobs[d.Digest] = b
		return d
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	hdr := &tar.Header{Name: "kured-host-vm-guest", Mode: 0o755, Size: int64(len(program)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
	if err := lw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := lw.Write(program); err != nil {
		return nil, err
	}
	if err := lw.Close(); err != nil {
		return nil, err
	}
	layerDesc := blob("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return nil, err
	}
	configDesc := blob("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return nil, err
	}
	manifestDesc := blob("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Platform = map[string]string{"architecture": "amd64", "os": "linux"}
	tag := name[strings.LastIndex(name, ":")+1:]
	manifestDesc.Annotations = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifestDesc},
	})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	add := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	if err := add("index.json", index); err != nil {
		return nil, err
	}
	for _, digest := range slices.Sorted(maps.Keys(blobs)) {
		if err := add("blobs/sha256/"+strings.TrimPrefix(digest, "sha256:"), blobs[digest]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// shareKubelet puts the real kubelet, its configuration and the images
// into the VM's share (share/kubelet), where provisioning finds them.
func shareKubelet(share string) error {
	dir := filepath.Join(share, "kubelet")
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(env.run, "kubelet"), filepath.Join(dir, "kubelet")); err != nil {
		return err
	}
	for _, f := range []string{"pause.tar", "workload.tar"} {
		if err := copyFile(filepath.Join(env.run, "images", f), filepath.Join(dir, "images", f)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(kubeletConfig), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "kubeadm-flags.env"), []byte(kubeadmFlags), 0o644)
}
