// Package events writes Kubernetes Events about Nodes with the node's own
// credentials. A message is made printable (daemon/printable) before it
// is written: it often quotes text from outside, and kubectl shows it on
// a terminal. An event has a name derived from what it reports, so that
// many nodes reporting the same thing (every waiting node sees a stuck
// holder) make one Event, not one per node.
package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// Once reports, about node, an event identified by key: the first report
// creates it, later reports of the same key by any node are dropped.
func (r *Recorder) Once(ctx context.Context, node, eventType, reason, message, key string) error {
	now := metav1.NewTime(r.now())
	sum := sha256.Sum256([]byte(reason + "\x00" + key))
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.kured-host.%s", node, hex.EncodeToString(sum[:6])),
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
	_, err := r.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("event %s on node %s: %w", reason, node, err)
	}
	return nil
}

func (r *Recorder) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// Emit reports a new event about node (each call its own Event).
func (r *Recorder) Emit(ctx context.Context, node, eventType, reason, message string) error {
	return r.Once(ctx, node, eventType, reason, message, fmt.Sprintf("%d", r.now().UnixNano()))
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
