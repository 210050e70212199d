package benchtest

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memStats is the test process's memory: resident now, its high-water
// mark (VmHWM) and the Go heap in use, in bytes.
type memStats struct{ rss, hwm, heap uint64 }

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

func readMem() memStats {
	var m memStats
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return m
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			m.rss = kb << 10
		case "VmHWM":
			m.hwm = kb << 10
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heap = ms.HeapInuse
	return m
}

// every runs f every d until the returned stop, which waits for it: the
// samplers of a roll, memory and load.
func every(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

const sampleEvery = 250 * time.Millisecond

// loadEvery is the load sampler's period, longer than the memory's: with
// the control plane in its own process each sample reads the API
// server's whole /metrics (2.1 MB, about 30 ms of its time), which at
// four a second took an eighth of a core from the server it measures.
const loadEvery = time.Second

// memSampler keeps the peaks of memStats, sampled every sampleEvery.
type memSampler struct {
	mu   sync.Mutex
	peak memStats
	end  func()
}

func startMemSampler() *memSampler {
	s := &memSampler{}
	s.sample()
	s.end = every(sampleEvery, s.sample)
	return s
}

func (s *memSampler) sample() {
	m := readMem()
	s.mu.Lock()
	s.peak = memStats{rss: max(s.peak.rss, m.rss), hwm: max(s.peak.hwm, m.hwm), heap: max(s.peak.heap, m.heap)}
	s.mu.Unlock()
}

func (s *memSampler) stop() memStats {
	s.end()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// cpuTime is the CPU time the process and the control plane's own
// process (if it has one) have used, user and system: the machine's
// cores that the roll took.
func cpuTime() cpuTimes {
	var ru syscall.Rusage
	var self time.Duration
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	server := cp.ProcessCPU()
	return cpuTimes{all: self + server, server: server}
}

// cpuTimes is the CPU used by both processes, and by the control plane's
// alone (zero with BENCH_ONE_PROCESS).
type cpuTimes struct{ all, server time.Duration }

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{all: a.all - b.all, server: a.server - b.server}
}
