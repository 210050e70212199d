package benchtest

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// niceFleet lowers the CPU priority of every thread of this process (the
// simulated hosts' daemons and kubelet stand-ins, and the bench) to nice
// n, leaving the control plane's child process as it was started. Linux
// keeps a priority per thread, and a new thread takes its creator's, so
// setting every thread that exists now covers those to come.
func niceFleet(n int) error {
	for range 2 { // threads started while the first pass ran
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("nice the fleet: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil {
				return fmt.Errorf("nice the fleet: thread %d: %w", tid, err)
			}
		}
	}
	return nil
}
