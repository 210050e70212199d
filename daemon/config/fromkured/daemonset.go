package fromkured

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kured-host/kured-host/daemon/printable"
)

// maxInput bounds what is read: a DaemonSet is a few kilobytes, and
// `helm template` of a whole chart some hundreds.
const maxInput = 16 << 20

// ReadDaemonSet reads kured's DaemonSet, as `kubectl get ds -o yaml` or
// `-o json` prints it: one DaemonSet, a List (or several documents, as
// `helm template` prints) holding one, or one named kured among several.
// kured is the container named kured, or the only container. Input that
// holds no such thing is an ErrInput.
func ReadDaemonSet(r io.Reader) (Source, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return Source{}, fmt.Errorf("read kured's DaemonSet: %w", err)
	}
	if len(data) > maxInput {
		return Source{}, fmt.Errorf("%w: the input is larger than %d MiB", ErrInput, maxInput>>20)
	}
	var found []appsv1.DaemonSet
	var others []string
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var doc json.RawMessage
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Source{}, fmt.Errorf("%w: neither YAML nor JSON: %s", ErrInput, printable.String(err.Error()))
		}
		if err := collect(doc, &found, &others); err != nil {
			return Source{}, err
		}
	}
	ds, err := pick(found, others)
	if err != nil {
		return Source{}, err
	}
	return fromDaemonSet(ds)
}

// object is what every Kubernetes object and List has.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// collect adds the DaemonSets in doc (an object or a List) to found, and
// names every other object in others.
func collect(doc json.RawMessage, found *[]appsv1.DaemonSet, others *[]string) error {
	if len(bytes.TrimSpace(doc)) == 0 || string(bytes.TrimSpace(doc)) == "null" {
		return nil // an empty document between two "---"
	}
	var o object
	if err := json.Unmarshal(doc, &o); err != nil {
		return fmt.Errorf("%w: not a Kubernetes object: %s", ErrInput, printable.String(err.Error()))
	}
	switch {
	case o.Kind == "DaemonSet":
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(doc, &ds); err != nil {
			return fmt.Errorf("%w: DaemonSet %s: %s", ErrInput, printable.String(o.Metadata.Name), printable.String(err.Error()))
		}
		*found = append(*found, ds)
	case strings.HasSuffix(o.Kind, "List"):
		for _, item := range o.Items {
			if err := collect(item, found, others); err != nil {
				return err
			}
		}
	case o.Kind == "":
		*others = append(*others, "an object with no kind")
	default:
		*others = append(*others, printable.String(strings.TrimSpace(o.Kind+" "+o.Metadata.Name)))
	}
	return nil
}

// pick chooses kured's DaemonSet: the only one, or the one named kured.
func pick(found []appsv1.DaemonSet, others []string) (appsv1.DaemonSet, error) {
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && len(others) == 0:
		return appsv1.DaemonSet{}, fmt.Errorf("%w: the input is empty (pipe in `kubectl -n kube-system get ds kured -o yaml`)", ErrInput)
	case len(found) == 0:
		return appsv1.DaemonSet{}, fmt.Errorf("%w: the input holds no DaemonSet, only %s", ErrInput, strings.Join(others, ", "))
	}
	var names []string
	for _, ds := range found {
		if ds.Name == "kured" {
			return ds, nil
		}
		names = append(names, printable.String(ds.Namespace+"/"+ds.Name))
	}
	return appsv1.DaemonSet{}, fmt.Errorf("%w: the input holds several DaemonSets (%s) and none is named kured: give kured's alone", ErrInput, strings.Join(names, ", "))
}

// fromDaemonSet reads kured's container: its command line, environment,
// mounts, and whether the pod has the host's network.
func fromDaemonSet(ds appsv1.DaemonSet) (Source, error) {
	name := "DaemonSet " + ds.Name
	if ds.Namespace != "" {
		name = fmt.Sprintf("DaemonSet %s/%s", ds.Namespace, ds.Name)
	}
	pod := ds.Spec.Template.Spec
	c, err := kuredContainer(printable.String(name), pod.Containers)
	if err != nil {
		return Source{}, err
	}
	if err := checkDaemonSet(ds, c); err != nil {
		return Source{}, err
	}
	src := Source{
		Name:        fmt.Sprintf("%s, container %s", name, c.Name),
		Env:         c.Env,
		InPod:       true,
		HostNetwork: pod.HostNetwork,
	}
	// The image's entrypoint is kured; a command replaces it.
	src.Args = c.Args
	if len(c.Command) > 0 {
		if base := path.Base(c.Command[0]); base != "kured" {
			src.Notes = append(src.Notes, fmt.Sprintf("the container's command is %q, not kured: the words after it are read as kured's arguments", c.Command[0]))
		}
		src.Args = append(append([]string{}, c.Command[1:]...), c.Args...)
	}
	for _, from := range c.EnvFrom {
		what := "a source"
		switch {
		case from.SecretRef != nil:
			what = "Secret " + from.SecretRef.Name
		case from.ConfigMapRef != nil:
			what = "ConfigMap " + from.ConfigMapRef.Name
		}
		src.Notes = append(src.Notes, fmt.Sprintf("envFrom %s: the KURED_ variables it may hold are not read here; convert them by hand", what))
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		mount := Mount{Path: m.MountPath, Volume: m.Name}
		if v, ok := volumes[m.Name]; ok && v.HostPath != nil {
			mount.HostPath = path.Join(v.HostPath.Path, m.SubPath)
		}
		src.Mounts = append(src.Mounts, mount)
	}
	return src, nil
}

func kuredContainer(ds string, cs []corev1.Container) (corev1.Container, error) {
	var names []string
	for _, c := range cs {
		if c.Name == "kured" {
			return c, nil
		}
		names = append(names, printable.String(c.Name))
	}
	switch len(cs) {
	case 0:
		return corev1.Container{}, fmt.Errorf("%w: %s has no container", ErrInput, ds)
	case 1:
		return cs[0], nil
	}
	return corev1.Container{}, fmt.Errorf("%w: %s has no container named kured among %s", ErrInput, ds, strings.Join(names, ", "))
}

// checkDaemonSet refuses a field of the DaemonSet that the drop-in or the
// terminal would show and that holds a character that does not print
// (ErrUnprintable), naming it by its path. kured's arguments and
// variables are checked as they are read (cmdline).
func checkDaemonSet(ds appsv1.DaemonSet, c corev1.Container) error {
	pod := ds.Spec.Template.Spec
	ci := slices.IndexFunc(pod.Containers, func(o corev1.Container) bool { return o.Name == c.Name })
	in := fmt.Sprintf("spec.template.spec.containers[%d].", ci)
	fields := [][2]string{{"metadata.name", ds.Name}, {"metadata.namespace", ds.Namespace}, {in + "name", c.Name}}
	if len(c.Command) > 0 {
		fields = append(fields, [2]string{in + "command[0]", c.Command[0]})
	}
	for i, from := range c.EnvFrom {
		switch {
		case from.SecretRef != nil:
			fields = append(fields, [2]string{fmt.Sprintf("%senvFrom[%d].secretRef.name", in, i), from.SecretRef.Name})
		case from.ConfigMapRef != nil:
			fields = append(fields, [2]string{fmt.Sprintf("%senvFrom[%d].configMapRef.name", in, i), from.ConfigMapRef.Name})
		}
	}
	for i, m := range c.VolumeMounts {
		at := fmt.Sprintf("%svolumeMounts[%d].", in, i)
		fields = append(fields, [2]string{at + "name", m.Name}, [2]string{at + "mountPath", m.MountPath}, [2]string{at + "subPath", m.SubPath})
	}
	for i, v := range pod.Volumes {
		if v.HostPath != nil {
			at := fmt.Sprintf("spec.template.spec.volumes[%d].", i)
			fields = append(fields, [2]string{at + "name", v.Name}, [2]string{at + "hostPath.path", v.HostPath.Path})
		}
	}
	for _, f := range fields {
		if err := checkText("the DaemonSet's "+f[0], f[1], f[1], ""); err != nil {
			return err
		}
	}
	return nil
}
