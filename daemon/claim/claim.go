// Package claim is the register of the slot lock: the claim a node keeps on
// its own Node object, as a state label (so that readers can select the
// nodes that take part) and a versioned JSON annotation, and its parsing,
// which never panics and treats what it cannot read as holding.
package claim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Keys on the Node object. The label and the annotation share a name.
// LimitsLabel is on waiting claims only, written with them: a digest of
// the limits they publish (LimitsDigest), so that a verify can read the
// active claims and the waiting ones that publish other limits than its
// own, and not the whole queue. SinceLabel is on waiting claims only too:
// the claim's place (SinceValue), so that a node reads the waiting claims
// ahead of it (a selector "<"), not the whole queue. CordonAnnotation
// marks a cordon that kured-host made: written with the cordon, in the
// claim's write that records it, and removed with the uncordon, so that it
// outlives the claim (a node whose claim is lost while its daemon is not
// running still knows the cordon is its own to undo).
const (
	Label            = "kured-host.dev/claim"
	Annotation       = "kured-host.dev/claim"
	LimitsLabel      = "kured-host.dev/waiting-limits"
	SinceLabel       = "kured-host.dev/waiting-since"
	CordonAnnotation = "kured-host.dev/cordoned"
)

// SinceValue is the SinceLabel value of a claim waiting since t: its Unix
// time in milliseconds, the precision of the annotation's times, as a
// decimal integer (a label selector compares such values with < and >).
func SinceValue(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// AheadSelector selects the waiting claims whose SinceLabel puts them
// ahead of, or level with, a claim waiting since t (the queue breaks a tie
// by name).
func AheadSelector(t time.Time) string {
	return SinceLabel + "<" + strconv.FormatInt(t.UnixMilli()+1, 10)
}

// SetCordon adds to a merge patch the fields that cordon the node (on) or
// undo the cordon as kured-host makes it: spec.unschedulable and the
// CordonAnnotation, always together, so that the annotation never says
// more or less than the cordon it marks. The drainer's own patch and the
// claim's write that records a cordon share this one shape.
func SetCordon(patch map[string]any, on bool) {
	var unschedulable, mark any // nil removes
	if on {
		unschedulable, mark = true, "true"
	}
	patch["spec"] = map[string]any{"unschedulable": unschedulable}
	meta, _ := patch["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		patch["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[CordonAnnotation] = mark
}

// LimitsDigest is a label value that differs for any two different
// limits: 16 hex digits of the SHA-256 of their JSON (the group rules in
// the order published; a reordering only makes a claim read, never one
// left out).
func LimitsDigest(l Limits) string {
	b, _ := json.Marshal(l) // plain structs: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Version of the annotation's JSON.
const Version = 1

// State is where a claim is in the protocol.
type State string

// The states, in protocol order. Active claims (entering, holding) use a
// unit of capacity.
const (
	Waiting  State = "waiting"
	Entering State = "entering"
	Holding  State = "holding"
)

// Active reports whether a claim in state s takes a slot.
func (s State) Active() bool { return s == Entering || s == Holding }

// Phase is how far a holder has got with its reboot; a restarted daemon
// resumes from it.
type Phase string

// The phases of a holder.
const (
	PhaseAcquired  Phase = ""           // committed; nothing done yet
	PhaseCordoned  Phase = "cordoned"   // cordoned (or found already unschedulable)
	PhaseDraining  Phase = "draining"   // evicting pods
	PhaseDrained   Phase = "drained"    // drain finished
	PhaseRebooting Phase = "rebooting"  // reboot requested in boot BootID
	PhaseRebooted  Phase = "rebooted"   // booted again; waiting for Ready and health
	PhaseReleasing Phase = "releasing"  // uncordoned; waiting out the release delay
	PhaseAborted   Phase = "aborted"    // gave up before the reboot (drain failed): uncordon, then release without a reboot
	PhaseUnknown   Phase = "unparsable" // for claims that could not be read
)

// Limits are the limits a claimant was configured with and publishes.
type Limits struct {
	Concurrency int          `json:"concurrency"`
	Groups      []GroupLimit `json:"groups,omitempty"`
}

// GroupLimit is at most Max holders among nodes sharing a value of Label.
type GroupLimit struct {
	Label string `json:"label"`
	Max   int    `json:"max"`
}

// Claim is the annotation's content.
type Claim struct {
	V       int       `json:"v"`
	State   State     `json:"state"`
	Since   time.Time `json:"since"`   // joined the queue (server time); fairness order
	Updated time.Time `json:"updated"` // the last write, on the API server's clock as the owner estimates it
	Limits  Limits    `json:"limits"`
	// Groups are the node's label values for each group rule, recorded when
	// announcing; a holder counts in these groups.
	Groups map[string]string `json:"groups,omitempty"`
	// Acquired is when it committed (holding), on the API server's clock
	// as the owner estimates it; the holder alarm and the optional TTL
	// count from it.
	Acquired         *time.Time `json:"acquired,omitempty"`
	BootID           string     `json:"bootID,omitempty"`
	Phase            Phase      `json:"phase,omitempty"`
	WasUnschedulable bool       `json:"wasUnschedulable"`
	// Cordoned says kured-host cordoned the node (it was schedulable), so
	// kured-host uncordons it when done.
	Cordoned bool `json:"cordoned,omitempty"`
	// ReleaseAt is when the release delay ends, persisted so that a restart
	// does not cut it short.
	ReleaseAt *time.Time `json:"releaseAt,omitempty"`
}

// ErrUnparsable marks a claim that cannot be read; it counts as holding.
var ErrUnparsable = errors.New("unparsable claim")

// Parse reads a claim from its label value and annotation. The state comes
// from the label, which stays stable across versions. Whatever cannot be
// read is returned as a holding claim together with an error wrapping
// ErrUnparsable, so that callers fail safe and can report it; an active
// claim whose limits cannot be read publishes concurrency 1. Group rules
// and values beyond the bounds (MaxGroupRules, label syntax) make a claim
// unreadable too.
func Parse(label, annotation string) (Claim, error) {
	state := State(label)
	switch state {
	case Waiting, Entering, Holding:
	default:
		return unparsable(fmt.Errorf("%w: unknown state label %q", ErrUnparsable, label))
	}
	var c Claim
	if err := json.Unmarshal([]byte(annotation), &c); err != nil {
		c = Claim{State: state}
		return failSafe(c, fmt.Errorf("%w: annotation: %v", ErrUnparsable, err))
	}
	// Label and annotation are written together, in one patch: when they
	// disagree, something else wrote one of them (an admin's edit of the
	// label alone), and neither can be trusted.
	written := c.State
	c.State = state
	if written != "" && written != state {
		return failSafe(c, fmt.Errorf("%w: the label says %s and the annotation %s", ErrUnparsable, state, written))
	}
	switch {
	case c.V != Version:
		return failSafe(c, fmt.Errorf("%w: annotation version %d, this build reads %d", ErrUnparsable, c.V, Version))
	case c.Limits.Concurrency < 1:
		return failSafe(c, fmt.Errorf("%w: concurrency %d in the annotation", ErrUnparsable, c.Limits.Concurrency))
	}
	if err := checkGroups(c); err != nil {
		return failSafe(c, fmt.Errorf("%w: %v", ErrUnparsable, err))
	}
	return c, nil
}

// MaxGroupRules is the most group rules a claim may publish, and the most
// group values it may record: a claim with more cannot be read. Every
// node reads every claim that binds it, on every change it sees, so what
// one claim may cost each reader must be bounded by the protocol, not by
// the size of an annotation (a compromised node writes what it likes).
// A configuration never has more (lock.groups).
const MaxGroupRules = 16

// checkGroups says which bound the group rules and values of c break, if
// any: too many of them, a rule label that is not a label key, a max
// below 1, or a recorded value that no label could have. A label ruled
// twice is allowed: the stricter max counts, and each counts against the
// bound.
func checkGroups(c Claim) error {
	if n := len(c.Limits.Groups); n > MaxGroupRules {
		return fmt.Errorf("%d group rules in the annotation, more than the %d a claim may publish", n, MaxGroupRules)
	}
	if n := len(c.Groups); n > MaxGroupRules {
		return fmt.Errorf("%d recorded group values in the annotation, more than the %d a claim may record", n, MaxGroupRules)
	}
	for _, g := range c.Limits.Groups {
		if errs := validation.IsQualifiedName(g.Label); len(errs) > 0 {
			return fmt.Errorf("group rule label %s in the annotation is not a label key: %s", excerpt(g.Label), strings.Join(errs, "; "))
		}
		if g.Max < 1 {
			return fmt.Errorf("group rule %s max %d in the annotation", excerpt(g.Label), g.Max)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Groups)) { // at most MaxGroupRules
		v := c.Groups[k]
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("recorded group %s in the annotation is not a label key: %s", excerpt(k), strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("recorded group %s=%s in the annotation is not a label value: %s", excerpt(k), excerpt(v), strings.Join(errs, "; "))
		}
	}
	return nil
}

// excerpt quotes s for a message, clipped: a string in a claim may be as
// long as the annotation, and the message reaches Events and the log.
func excerpt(s string) string {
	const most = 64
	if len(s) <= most {
		return strconv.Quote(s)
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

func unparsable(err error) (Claim, error) {
	return Claim{State: Holding, Phase: PhaseUnknown, Limits: Limits{Concurrency: 1}}, err
}

// failSafe keeps what was read of an active claim but makes it publish the
// strictest global limit; a waiting claim that cannot be read is ignored
// by eligibility, so its content does not matter.
func failSafe(c Claim, err error) (Claim, error) {
	c.Limits = Limits{Concurrency: 1}
	if c.State.Active() {
		c.Phase = PhaseUnknown
	}
	return c, err
}

// Marshal writes the annotation value.
func (c Claim) Marshal() (string, error) {
	c.V = Version
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode claim: %w", err)
	}
	return string(b), nil
}
