// Package events writes Kubernetes Events about Nodes with the node's own
// credentials. A message is made printable (daemon/printable) before it
// is written: it often quotes text from outside, and kubectl shows it on
// a terminal.
//
// Each Event gets a name with a random part (crypto/rand) that nobody can
// predict. Every node may create, update and patch Events, but not read
// them: a name derived from what an Event reports let a compromised node
// create the Event first, so that the honest report found the name taken
// and was dropped, or overwrite it afterwards with whatever it liked
// (issue 39, finding 5). So no two reports share an Event, and whoever
// reports decides how often: the lock's rule and daemon/alarm for the
// alarms, Limited for the cycle's own Events.
package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kured-host/kured-host/daemon/printable"
)

// Component is the source of kured-host's events.
const Component = "kured-host"

// Recorder creates Events in the default namespace, as the kubelet does for
// Node events.
type Recorder struct {
	Client kubernetes.Interface
	// Host is the node that reports (the event's source host).
	Host string
	Now  func() time.Time
}

// Emit reports a new event about node: each call creates an Event of its
// own, named NODE.kured-host.RANDOM (16 hex digits, 64 bits from
// crypto/rand). A name that is taken is an error, never "already
// reported": an Event this node did not write says nothing about what
// this one reports.
func (r *Recorder) Emit(ctx context.Context, node, eventType, reason, message string) error {
	now := metav1.NewTime(r.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      eventName(node),
			Namespace: metav1.NamespaceDefault,
		},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node), APIVersion: "v1"},
		Reason:         reason,
		Message:        printable.String(message),
		Type:           eventType,
		Source:         corev1.EventSource{Component: Component, Host: r.Host},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "kured-host.dev/kured-host",
		ReportingInstance:   r.Host,
	}
	if _, err := r.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("event %s on node %s: %w", reason, node, err)
	}
	return nil
}

// eventName is a new Event name about node: NODE.kured-host. and 16 hex
// digits from crypto/rand (whose Read never fails).
func eventName(node string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return node + ".kured-host." + hex.EncodeToString(b[:])
}

func (r *Recorder) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// Sink is where Limited sends the events it lets through.
type Sink interface {
	Emit(ctx context.Context, node, eventType, reason, message string) error
}

// Limited keeps a stuck state from flooding the node's Events: the same
// reason and message are recorded at most once per Repeat, and the same
// reason with a new message at most once per Spacing. A cycle records
// each of its reasons once, so only a state that keeps repeating (a
// blocker, an overdue reboot, a drain failing again) is held back.
type Limited struct {
	Sink    Sink
	Now     func() time.Time
	Repeat  time.Duration // same reason and message
	Spacing time.Duration // same reason, any message

	mu   sync.Mutex
	last map[string]time.Time // reason or reason+message -> last recorded
}

// Emit records the event unless it repeats too soon; held-back events
// return nil (they are not errors, the log still has them).
func (l *Limited) Emit(ctx context.Context, node, eventType, reason, message string) error {
	if !l.admit(reason, message) {
		return nil
	}
	return l.Sink.Emit(ctx, node, eventType, reason, message)
}

func (l *Limited) admit(reason, message string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.Now()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	exact := reason + "\x00" + message
	if t, ok := l.last[exact]; ok && now.Sub(t) < l.Repeat {
		return false
	}
	if t, ok := l.last[reason]; ok && now.Sub(t) < l.Spacing {
		return false
	}
	l.last[exact], l.last[reason] = now, now
	return true
}
