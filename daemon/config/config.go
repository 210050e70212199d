// Package config is kured-host's configuration: the schema, its safe
// defaults, strict loading of /etc/kured-host/config.toml and its drop-ins,
// and validation that reports every problem at once with file, key and line.
package config

import (
	"path/filepath"
	"time"
)

// Version is the configuration format this build understands.
const Version = 1

// Default paths on the host.
const (
	DefaultPath   = "/etc/kured-host/config.toml"
	DropInDirName = "config.d"
)

// ZoneLabel is the well-known topology label the default group limit uses.
const ZoneLabel = "topology.kubernetes.io/zone"

// Config is the whole configuration. Field tags are the TOML keys; the
// comments in config.toml.example are the user-facing documentation.
type Config struct {
	Version    int              `toml:"version"`
	Kubernetes KubernetesConfig `toml:"kubernetes"`
	Sentinel   SentinelConfig   `toml:"sentinel"`
	Window     WindowConfig     `toml:"window"`
	Lock       LockConfig       `toml:"lock"`
	Blockers   BlockersConfig   `toml:"blockers"`
	Drain      DrainConfig      `toml:"drain"`
	Reboot     RebootConfig     `toml:"reboot"`
	Health     HealthConfig     `toml:"health"`
	Node       NodeConfig       `toml:"node"`
	Notify     NotifyConfig     `toml:"notify"`
	Metrics    MetricsConfig    `toml:"metrics"`
	Log        LogConfig        `toml:"log"`
}

// KubernetesConfig says how to reach the API server and as whom.
type KubernetesConfig struct {
	// Kubeconfig is the kubelet's kubeconfig; empty means discover it.
	Kubeconfig string `toml:"kubeconfig"`
	// NodeName overrides the name learned from the credentials.
	NodeName string `toml:"node_name"`
}

// SentinelConfig says how to tell that the host needs a reboot.
type SentinelConfig struct {
	File            string   `toml:"file"`
	Command         []string `toml:"command"`
	RebootExitCodes []int    `toml:"reboot_exit_codes"`
	CommandTimeout  Duration `toml:"command_timeout"`
	Period          Duration `toml:"period"`
}

// WindowConfig is the maintenance window in which a reboot may start.
type WindowConfig struct {
	Days     []Weekday `toml:"days"`
	Start    TimeOfDay `toml:"start"`
	End      TimeOfDay `toml:"end"`
	TimeZone Location  `toml:"time_zone"`
}

// LockConfig is the slot lock: how many nodes may reboot at once, globally
// and per group (zone), and the timings around a claim.
type LockConfig struct {
	Concurrency      int          `toml:"concurrency"`
	Groups           []GroupLimit `toml:"groups"`
	AlarmAge         Duration     `toml:"alarm_age"`
	EnteringAlarmAge Duration     `toml:"entering_alarm_age"`
	TTL              Duration     `toml:"ttl"`
	ReleaseDelay     Duration     `toml:"release_delay"`
	WaitingGrace     Duration     `toml:"waiting_grace"`
}

// GroupLimit caps the holders among nodes that share a value of Label.
type GroupLimit struct {
	Label string `toml:"label"`
	Max   int    `toml:"max"`
}

// BlockersConfig lists what keeps a node from starting a reboot.
type BlockersConfig struct {
	PodSelectors []Selector       `toml:"pod_selectors"`
	Inhibitors   bool             `toml:"inhibitors"`
	Prometheus   PrometheusConfig `toml:"prometheus"`
}

// PrometheusConfig blocks reboots while alerts fire. The credential files
// are read at each request, so that a rotated secret is used without a
// restart.
type PrometheusConfig struct {
	URL URL `toml:"url"`
	// Username and PasswordFile are HTTP basic authentication; the
	// password is the file's content without surrounding white space.
	Username     string `toml:"username"`
	PasswordFile string `toml:"password_file"`
	// BearerTokenFile holds a token sent as "Authorization: Bearer".
	BearerTokenFile string `toml:"bearer_token_file"`
	// CAFile is a PEM bundle: the only certificates trusted for an
	// https URL; empty means the system's.
	CAFile               string   `toml:"ca_file"`
	AlertFilterRegexp    Regexp   `toml:"alert_filter_regexp"`
	AlertFilterMatchOnly bool     `toml:"alert_filter_match_only"`
	AlertFiringOnly      bool     `toml:"alert_firing_only"`
	Timeout              Duration `toml:"timeout"`
}

// DrainConfig is how the node is cordoned and emptied before the reboot.
type DrainConfig struct {
	// GracePeriod below zero means each pod's own grace period.
	GracePeriod              Duration `toml:"grace_period"`
	Timeout                  Duration `toml:"timeout"`
	PodSelector              Selector `toml:"pod_selector"`
	SkipWaitForDeleteTimeout Duration `toml:"skip_wait_for_delete_timeout"`
	Delay                    Duration `toml:"delay"`
	DeleteEmptyDirData       bool     `toml:"delete_emptydir_data"`
	EvictUnreplicated        bool     `toml:"evict_unreplicated"`
	ForceReboot              bool     `toml:"force_reboot"`
}

// Reboot methods.
const (
	RebootLogind  = "logind"
	RebootCommand = "command"
)

// RebootConfig is how the machine is rebooted.
type RebootConfig struct {
	Method  string   `toml:"method"`
	Command []string `toml:"command"`
	Delay   Duration `toml:"delay"`
	// Timeout: ask again when still up this long after asking; also the
	// bound of one run of Command.
	Timeout Duration `toml:"timeout"`
}

// HealthConfig gates the release of the slot after the reboot.
type HealthConfig struct {
	Command []string `toml:"command"`
	// Timeout: report when not Ready and healthy this long after the
	// boot; also the bound of one run of Command.
	Timeout Duration `toml:"timeout"`
}

// NodeConfig is what kured-host marks on its own Node besides the claim.
type NodeConfig struct {
	Annotate         bool              `toml:"annotate"`
	PreRebootLabels  map[string]string `toml:"pre_reboot_labels"`
	PostRebootLabels map[string]string `toml:"post_reboot_labels"`
}

// NotifyConfig sends messages about reboots.
type NotifyConfig struct {
	URLs             []URL    `toml:"urls"`
	TemplateDrain    Template `toml:"template_drain"`
	TemplateReboot   Template `toml:"template_reboot"`
	TemplateUncordon Template `toml:"template_uncordon"`
	TemplateFailure  Template `toml:"template_failure"`
}

// MetricsConfig is the Prometheus endpoint; an empty address turns it off.
type MetricsConfig struct {
	Address string `toml:"address"`
}

// Log formats and levels.
const (
	LogText = "text"
	LogJSON = "json"
)

// LogConfig is the log output.
type LogConfig struct {
	Format string `toml:"format"`
	Level  string `toml:"level"`
}

// Default returns the built-in configuration: one node at a time, at most
// one per zone when concurrency is raised, drain before reboot, reboot
// through logind. Each call returns fresh slices and maps.
func Default() Config {
	const (
		minute = Duration(time.Minute)
		hour   = Duration(time.Hour)
	)
	return Config{
		Version: Version,
		Sentinel: SentinelConfig{
			File:            "/run/reboot-required",
			Command:         []string{},
			RebootExitCodes: []int{0},
			CommandTimeout:  minute,
			Period:          hour,
		},
		Window: WindowConfig{
			Days:     []Weekday{0, 1, 2, 3, 4, 5, 6},
			Start:    0,
			End:      EndOfDay,
			TimeZone: MustLocation("UTC"),
		},
		Lock: LockConfig{
			Concurrency:      1,
			Groups:           []GroupLimit{{Label: ZoneLabel, Max: 1}},
			AlarmAge:         hour,
			EnteringAlarmAge: 10 * minute,
			ReleaseDelay:     0,
			WaitingGrace:     2 * minute,
		},
		Blockers: BlockersConfig{
			PodSelectors: []Selector{},
			Inhibitors:   true,
			Prometheus:   PrometheusConfig{Timeout: minute / 2},
		},
		Drain: DrainConfig{
			GracePeriod:        -Duration(time.Second),
			DeleteEmptyDirData: true,
			EvictUnreplicated:  true,
		},
		Reboot: RebootConfig{
			Method:  RebootLogind,
			Command: []string{"/bin/systemctl", "reboot"},
			Timeout: 15 * minute,
		},
		Health: HealthConfig{
			Command: []string{},
			Timeout: 30 * minute,
		},
		Node: NodeConfig{
			PreRebootLabels:  map[string]string{},
			PostRebootLabels: map[string]string{},
		},
		Notify: NotifyConfig{
			URLs:             []URL{},
			TemplateDrain:    MustTemplate("Draining node {{.Node}}"),
			TemplateReboot:   MustTemplate("Rebooting node {{.Node}}"),
			TemplateUncordon: MustTemplate("Node {{.Node}} rebooted & uncordoned successfully!"),
			TemplateFailure:  MustTemplate("Reboot of node {{.Node}} failed: {{.Reason}}"),
		},
		Log: LogConfig{Format: LogText, Level: "info"},
	}
}

// DropInDir is where the drop-ins for the file at path live.
func DropInDir(path string) string {
	return filepath.Join(filepath.Dir(path), DropInDirName)
}
