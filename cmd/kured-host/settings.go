package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/printable"
	"github.com/kured-host/kured-host/daemon/redact"
	"github.com/kured-host/kured-host/daemon/steer"
)

const settingsAbout = `Shows the cluster's settings: the lock's limits (lock.concurrency,
lock.groups), the maintenance window and the blockers that every node
uses unless its own files set them (never credentials, files or
commands: docs/configuration.md lists the keys). They are TOML in the schema of
config.toml, in the key config.toml of the ConfigMap kube-system/kured-host.
Each value is shown with where it comes from: the settings (and their
line) or the built-in default. On a node, a key its files set wins:
"kured-host check --config-only" there shows the node's own view.

A node reads the settings when it needs a reboot, before it joins the
queue, and publishes the limits it took in its claim; the strictest limit
any node publishes binds every node, so a change mid-roll is safe: a
lower limit binds as soon as one node joins with it, a higher one once
the nodes that joined under the lower one are through.

  kured-host settings apply -f FILE   validate FILE, then write it

The kubectl equivalent of apply (without the validation):

  kubectl -n kube-system create configmap kured-host --from-file=config.toml=FILE \
    --dry-run=client -o yaml | kubectl apply -f -

` + ordersAbout

func runSettings(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "apply" {
		return runSettingsApply(ctx, args[1:], stdout)
	}
	f := newFlags("settings", "[--kubeconfig FILE] | settings apply -f FILE [--kubeconfig FILE]", settingsAbout)
	kubeconfig := kubeconfigFlag(f)
	if done, err := f.parse(args, stdout); done {
		return err
	}
	c, _, err := adminClient(ctx, *kubeconfig)
	if err != nil {
		return err
	}
	text, err := steer.Reader{Client: c}.Settings(ctx)
	if err != nil {
		return err
	}
	if strings.TrimSpace(text) == "" {
		_, err := fmt.Fprintf(stdout, "no cluster settings (the ConfigMap %s/%s has no key %s): every node uses its own files and the built-in defaults\n", steer.Namespace, steer.Name, steer.KeySettings)
		return err
	}
	l, err := config.CheckCluster(text)
	if err != nil {
		fmt.Fprintf(stdout, "# the cluster's settings, as stored (credentials, URLs and control characters hidden):\n%s\n", shownSettings(text))
		return fmt.Errorf("the cluster's settings are not valid; the nodes keep what they had:\n%w", err)
	}
	var b bytes.Buffer
	if err := l.Render(&b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# the cluster's settings (%s), over the built-in defaults;\n# on a node, a key its own files set wins\n", config.ClusterSource)
	return writeClusterPart(stdout, b.Bytes())
}

// writeClusterPart keeps, of a rendered configuration, what the cluster's
// settings may set (config.ClusterKeys) and the tables that hold it.
func writeClusterPart(w io.Writer, rendered []byte) error {
	var out bytes.Buffer
	table, header := "", ""
	sc := bufio.NewScanner(bytes.NewReader(rendered))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "["):
			table, header = strings.Trim(trimmed, "[]"), line
			if strings.HasPrefix(trimmed, "[[") && config.IsClusterKey(table) {
				out.WriteString(line + "\n")
				header = ""
			}
			continue
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			continue
		}
		key, _, _ := strings.Cut(trimmed, " ")
		if !config.IsClusterKey(table+"."+key) && !config.IsClusterKey(table) {
			continue
		}
		if header != "" {
			out.WriteString(header + "\n")
			header = ""
		}
		// A valid regular expression may still hold a bidirectional
		// control, which the TOML encoder writes as it is.
		out.WriteString(printable.String(line) + "\n")
	}
	if err := sc.Err(); err != nil {
		return err
	}
	_, err := w.Write(out.Bytes())
	return err
}

// secretLine matches a TOML line whose key may hold a secret, however it
// is spelt in settings that are not valid.
var secretLine = regexp.MustCompile(`(?i)^(\s*"?[a-z0-9_.-]*(pass|token|secret|user|key|auth|cred)[a-z0-9_.-]*"?\s*=\s*).*$`)

// shownSettings is stored settings text as it may be shown: the value of
// any key that may be a secret hidden, URLs redacted (daemon/redact), and
// what a terminal would act on escaped. Settings that are not valid may
// hold anything a writer put there.
func shownSettings(text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, line := range lines {
		line = secretLine.ReplaceAllString(line, "${1}"+`"`+redact.Mark+`"`)
		lines[i] = printable.String(redact.Text(line))
	}
	return strings.Join(lines, "\n")
}

func runSettingsApply(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("settings apply", "-f FILE [--kubeconfig FILE]", "Validates FILE as the cluster's settings (the schema of config.toml,\nonly lock.concurrency, lock.groups, window and blockers, without\ncredentials or files: docs/configuration.md lists the keys), then writes it\nto the key config.toml of the ConfigMap kube-system/kured-host.\n\n"+ordersAbout)
	file := f.String("f", "", "the settings `file` (TOML); - reads standard input")
	kubeconfig := kubeconfigFlag(f)
	if done, err := f.parse(args, stdout); done {
		return err
	}
	if *file == "" {
		return &usageError{"settings apply: -f FILE is required"}
	}
	var data []byte
	var err error
	if *file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("settings apply: %w", err)
	}
	l, err := config.CheckCluster(string(data))
	if err != nil {
		// A *config.Error: exit status 2; its lines are the file's.
		return fmt.Errorf("%s, as the cluster's settings: %w", *file, err)
	}
	c, _, err := adminClient(ctx, *kubeconfig)
	if err != nil {
		return err
	}
	if err := steer.SetSettings(ctx, c, string(data)); err != nil {
		return err
	}
	if _, ok := l.Origins["blockers.prometheus.url"]; ok {
		fmt.Fprintf(stdout, "note: a node whose own files set Prometheus credentials refuses a URL from the cluster's settings (SettingsInvalid): its credentials go only to a URL from its own files\n")
	}
	_, err = fmt.Fprintf(stdout, "applied: the nodes take the settings when they next need a reboot, before they join the queue (kured-host settings shows them)\n")
	return err
}
