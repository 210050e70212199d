package lock

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/queue"
)

// readReady reads the readiness of the nodes names (a GET each, from the
// API server's cache), for the Front, which asked for them: the queue is
// read as metadata, which has no Ready condition (queue.ReadyProbe). It
// reports whether a read succeeded. A node gone is taken as Ready: the
// watch tells its claim is gone.
func (l *Lock) readReady(ctx context.Context, names []string) bool {
	read := false
	for _, name := range names {
		node, err := l.o.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
		switch {
		case apierrors.IsNotFound(err):
			l.front.NoteReady(name, true, l.o.Now())
		case err != nil:
			l.front.ReadFailed(name, l.o.Now())
			l.log.Debug("cannot read a node of the queue", "node", name, "err", err)
			continue
		default:
			l.front.NoteReady(name, queue.NodeReady(node), l.o.Now())
		}
		read = true
	}
	return read
}
