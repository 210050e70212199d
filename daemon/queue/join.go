package queue

import "time"

// JoinRate is the pace at which the nodes of a cluster join the queue
// together, at most: each waits a random time up to nodes/JoinRate
// (JoinSpreadMax at most) before it writes. A join is about ten requests
// (the write, the reads of the queue ahead and of the claims that bind
// the node, a watch); at 50 a second the first seconds of a 500-node
// roll were where kured-host slowed the kubelets' heartbeats (p99 51 to
// 83 ms against 20 to 23 for a lock that makes no requests, on `make
// bench`); at 25 its roll's heartbeats were the no-request lock's within
// a few ms. The first node still joins at once, and 25 a second is five
// times the pace at which k = 10 slots of 2 s are taken.
const (
	JoinRate      = 25 // nodes per second
	JoinSpreadMax = 2 * time.Minute
)

// JoinSpread is the time over which the nodes of a cluster of n nodes
// that all learn of a reboot at once write their joins.
func JoinSpread(n int) time.Duration {
	return min(time.Duration(n)*time.Second/JoinRate, JoinSpreadMax)
}

// JoinDelay is how long a node of a cluster of n nodes waits before it
// writes its join: draw(x) is a random number in [0, x), and the delay is
// up to JoinSpread(n); none when n is not known (0).
func JoinDelay(n int, draw func(int64) int64) time.Duration {
	spread := JoinSpread(n)
	if spread <= 0 {
		return 0
	}
	return time.Duration(draw(int64(spread)))
}
