package config

// KuredOption maps one of kured's command-line options to the kured-host
// key that replaces it, or says why a host service does not need it. The
// table in docs/configuration.md is generated from this list (see the
// golden test), and unknown-key errors use it to point kured users at the
// right key.
type KuredOption struct {
	Flag string // kured's flag, such as "--reboot-days"
	Key  string // the kured-host key; empty when there is none
	Note string
}

// KuredOptions covers every flag of kured 1.x's command line.
var KuredOptions = []KuredOption{
	{"--node-id", "kubernetes.node_name", "Learned from the kubelet's credentials (SelfSubjectReview); set only to override."},
	{"--period", "sentinel.period", "The sentinel file is watched with inotify; the period is only the fallback re-check (and the interval for a sentinel command)."},
	{"--reboot-sentinel", "sentinel.file", "Default `/run/reboot-required` (`/var/run` is a symlink to `/run`)."},
	{"--reboot-sentinel-command", "sentinel.command", "An argv array, not a shell string; with `sentinel.reboot_exit_codes` (kured: exit 0 means reboot) and `sentinel.command_timeout`."},
	{"--reboot-days", "window.days", "Same day names (`mo`, `mon`, `monday`). A window across midnight differs: kured counts the hours after midnight for the day they fall on, kured-host for the day the window opened. With `mon-fri 21:00-05:00`, kured opens Mon-Fri 00:00-05:00 and 21:00-24:00; kured-host opens Mon 21:00 until Tue 05:00, and so on until Fri 21:00 until Sat 05:00: Monday 00:00-05:00 is out, Saturday 00:00-05:00 is in. `kured-host check` lists the openings of the coming week."},
	{"--start-time", "window.start", "`HH:MM` or `HH:MM:SS` (kured's `11pm` and `23` forms: write `23:00`)."},
	{"--end-time", "window.end", "`HH:MM`, `HH:MM:SS` or `24:00`; an end before the start crosses midnight. The end is excluded (kured: included to its last second), so kured's default `23:59:59` is `24:00` here."},
	{"--time-zone", "window.time_zone", "IANA name, `UTC` (default) or `Local`."},
	{"--concurrency", "lock.concurrency", "Plus `lock.groups`: per-zone (or any label) limits, one per zone by default."},
	{"--lock-ttl", "lock.ttl", "Off by default; turning it on trades safety for progress (see the lock documentation)."},
	{"--lock-release-delay", "lock.release_delay", "Persisted in the claim, so a restart does not cut it short."},
	{"--lock-annotation", "", "No shared lock object: each node keeps its claim on its own Node."},
	{"--ds-name", "", "No DaemonSet: kured-host runs on the host under systemd."},
	{"--ds-namespace", "", "No DaemonSet: kured-host runs on the host under systemd."},
	{"--drain-grace-period", "drain.grace_period", "A duration; negative (default) means each pod's own grace period, as kured's -1."},
	{"--drain-timeout", "drain.timeout", "`0s` (default) waits forever, as kured."},
	{"--drain-pod-selector", "drain.pod_selector", ""},
	{"--drain-delay", "drain.delay", ""},
	{"--skip-wait-for-delete-timeout", "drain.skip_wait_for_delete_timeout", "A duration instead of seconds."},
	{"--force-reboot", "drain.force_reboot", ""},
	{"--reboot-delay", "reboot.delay", ""},
	{"--reboot-method", "reboot.method", "`logind` (default: org.freedesktop.login1.Manager.Reboot over D-Bus) or `command`."},
	{"--reboot-command", "reboot.command", "An argv array; runs directly on the host (no nsenter)."},
	{"--reboot-signal", "", "Not needed: the signal method exists because a container cannot call logind; a host service can."},
	{"--blocking-pod-selector", "blockers.pod_selectors", "An array of selectors; any match on this node blocks."},
	{"--prometheus-url", "blockers.prometheus.url", "Credentials go in `blockers.prometheus.username` and `password_file`, or `bearer_token_file`, rather than in the URL; `ca_file` for a private CA. Shown redacted everywhere."},
	{"--alert-filter-regexp", "blockers.prometheus.alert_filter_regexp", ""},
	{"--alert-filter-match-only", "blockers.prometheus.alert_filter_match_only", ""},
	{"--alert-firing-only", "blockers.prometheus.alert_firing_only", ""},
	{"--notify-url", "notify.urls", "An array of shoutrrr URLs, checked by the library's own parser when the configuration loads. kured's Teams form (`teams://group@tenant/altId/groupOwner?host=…`) lacks the webhook's last part: the error says what to write."},
	{"--slack-hook-url", "notify.urls", "Deprecated in kured; write a `slack://` URL in `notify.urls`."},
	{"--slack-username", "notify.urls", "Part of the `slack://` URL."},
	{"--slack-channel", "notify.urls", "Part of the `slack://` URL."},
	{"--message-template-drain", "notify.template_drain", "Go template: write `{{.Node}}` where kured had `%s`; a `%s` is refused, the error shows the template to write."},
	{"--message-template-reboot", "notify.template_reboot", "Go template: write `{{.Node}}` where kured had `%s`; a `%s` is refused, the error shows the template to write."},
	{"--message-template-uncordon", "notify.template_uncordon", "Go template: write `{{.Node}}` where kured had `%s`; a `%s` is refused, the error shows the template to write."},
	{"--pre-reboot-node-labels", "node.pre_reboot_labels", "A table `key = \"value\"`; labels a node may not set on itself are rejected."},
	{"--post-reboot-node-labels", "node.post_reboot_labels", "A table `key = \"value\"`."},
	{"--annotate-nodes", "node.annotate", "Same `weave.works/kured-*` annotations, set and removed when kured sets and removes them (needed and in the window, even while blocked; removed after the reboot)."},
	{"--prefer-no-schedule-taint", "", "A node may not taint itself (NodeRestriction). A node in the queue carries the label `kured-host.dev/claim` (`waiting`, then `entering`, `holding`): a preferred node affinity with `kured-host.dev/claim DoesNotExist` keeps pods away as the taint did (example in operations.md)."},
	{"--log-format", "log.format", "`text` or `json`; under systemd, lines carry journald priorities."},
	{"--metrics-host", "metrics.address", "One `host:port`; off by default."},
	{"--metrics-port", "metrics.address", "One `host:port`; off by default."},
}
