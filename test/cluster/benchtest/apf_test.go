package benchtest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// The API server's priority and fairness keeps its own record of how long
// each request waited in its level's queues before it ran
// (apiserver_flowcontrol_request_wait_duration_seconds). A heartbeat's
// latency as the kubelet sees it also holds the time the server, etcd and
// every simulated host spend sharing this machine's cores; the queue wait
// is the part that another client's requests in the same level cause
// through priority and fairness, whatever the machine.
const (
	apfWaitMetric = "apiserver_flowcontrol_request_wait_duration_seconds"
	// heartbeatLevel is the level of the kubelets' Lease and Node status
	// updates, which kured-host's reads and writes of Nodes share
	// (docs/api-load.md).
	heartbeatLevel = "node-high"
)

// apfWait is a cumulative histogram of the queue waits of the requests
// that ran in one priority level.
type apfWait struct {
	Bounds []float64 `json:"bounds"` // upper bounds, seconds
	Counts []uint64  `json:"counts"` // cumulative, per bound
	Total  uint64    `json:"total"`
}

// apfWaitNow reads the level's histogram from the API server's metrics,
// summed over its FlowSchemas.
func apfWaitNow(level string) (apfWait, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mfs, err := cp.Metrics(ctx, apfWaitMetric)
	if err != nil {
		return apfWait{}, err
	}
	var w apfWait
	if mf := mfs[apfWaitMetric]; mf != nil {
		for _, m := range mf.GetMetric() {
			ran, inLevel := false, false
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "priority_level":
					inLevel = l.GetValue() == level
				case "execute":
					ran = l.GetValue() == "true"
				}
			}
			if !ran || !inLevel {
				continue
			}
			h := m.GetHistogram()
			if w.Bounds == nil {
				for _, b := range h.GetBucket() {
					w.Bounds = append(w.Bounds, b.GetUpperBound())
				}
				w.Counts = make([]uint64, len(w.Bounds))
			}
			for i, b := range h.GetBucket() {
				if i < len(w.Counts) {
					w.Counts[i] += b.GetCumulativeCount()
				}
			}
			w.Total += h.GetSampleCount()
		}
	}
	return w, nil
}

// sub is what was recorded between before and w.
func (w apfWait) sub(before apfWait) apfWait {
	d := apfWait{Bounds: w.Bounds, Counts: make([]uint64, len(w.Counts)), Total: w.Total - before.Total}
	for i := range w.Counts {
		d.Counts[i] = w.Counts[i]
		if i < len(before.Counts) {
			d.Counts[i] -= before.Counts[i]
		}
	}
	return d
}

// quantile is the upper bound of the bucket that holds the q-quantile:
// the wait that fraction q of the requests did not exceed (+Inf past the
// last bound).
func (w apfWait) quantile(q float64) float64 {
	if w.Total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(w.Total)))
	for i, c := range w.Counts {
		if c >= want {
			return w.Bounds[i]
		}
	}
	return math.Inf(1)
}

// over is how many requests waited longer than the first bound above
// zero (5 ms in the API server's buckets).
func (w apfWait) over() (bound float64, n uint64) {
	for i, b := range w.Bounds {
		if b > 0 {
			return b, w.Total - w.Counts[i]
		}
	}
	return 0, 0
}

func (w apfWait) String() string {
	if w.Total == 0 {
		return "no requests"
	}
	b, n := w.over()
	p99 := "≤ " + ms(w.quantile(0.99))
	if q := w.quantile(0.99); math.IsInf(q, 1) {
		p99 = "over " + ms(w.Bounds[len(w.Bounds)-1])
	}
	return fmt.Sprintf("%d requests, p99 %s, %d waited over %s", w.Total, p99, n, ms(b))
}

// load is what the machine did over a stretch of time: the process's CPU
// (the API server, etcd and every simulated host share it) in cores busy,
// and the heartbeat level's queue waits.
type load struct {
	Cores float64 `json:"cpuCoresBusy"`
	Wait  apfWait `json:"heartbeatLevelWait"`
}

// loadSample is the process's CPU time and the heartbeat level's queue
// waits at one moment.
type loadSample struct {
	at   time.Time
	cpu  time.Duration
	wait apfWait
}

func sampleLoad() loadSample {
	w, _ := apfWaitNow(heartbeatLevel) // a failed read shows as no requests
	return loadSample{at: time.Now(), cpu: cpuTime().all, wait: w}
}

// loadBetween is the load from a to b.
func loadBetween(a, b loadSample) load {
	l := load{Wait: b.wait.sub(a.wait)}
	if d := b.at.Sub(a.at); d > 0 {
		l.Cores = float64(b.cpu-a.cpu) / float64(d)
	}
	return l
}

// loadSampler samples the load every loadEvery during a roll, so that
// its busiest second can be looked at afterwards.
type loadSampler struct {
	mu      sync.Mutex
	samples []loadSample
	end     func()
}

func startLoadSampler() *loadSampler {
	s := &loadSampler{samples: []loadSample{sampleLoad()}}
	s.end = every(loadEvery, func() {
		ls := sampleLoad()
		s.mu.Lock()
		s.samples = append(s.samples, ls)
		s.mu.Unlock()
	})
	return s
}

func (s *loadSampler) stop() []loadSample {
	s.end()
	return append(s.samples, sampleLoad())
}

// loadAround is the load over the shortest sampled stretch that covers
// [from, to): from the last sample at or before from to the first at or
// after to (loadEvery wider on each side at most).
func loadAround(samples []loadSample, from, to time.Time) load {
	if len(samples) == 0 {
		return load{}
	}
	a, b := samples[0], samples[len(samples)-1]
	for _, s := range samples {
		if !s.at.After(from) {
			a = s
		}
		if !s.at.Before(to) {
			b = s
			break
		}
	}
	return loadBetween(a, b)
}

// The queue-wait figures come from cumulative buckets: a stretch is the
// difference of two readings, and its quantile the bucket that holds it.
func TestAPFWait(t *testing.T) {
	bounds := []float64{0, 0.005, 0.02, 0.05}
	before := apfWait{Bounds: bounds, Counts: []uint64{10, 20, 20, 20}, Total: 20}
	after := apfWait{Bounds: bounds, Counts: []uint64{10, 115, 119, 120}, Total: 121}
	d := after.sub(before)
	if d.Total != 101 || !slices.Equal(d.Counts, []uint64{0, 95, 99, 100}) {
		t.Fatalf("difference %+v, want 101 requests and counts [0 95 99 100]", d)
	}
	for _, tc := range []struct {
		q    float64
		want float64
	}{
		{0.5, 0.005},
		{0.95, 0.02},
		{0.99, 0.05},
		{1, math.Inf(1)}, // one request waited past the last bound
	} {
		if got := d.quantile(tc.q); got != tc.want {
			t.Errorf("quantile %.2f = %v, want %v", tc.q, got, tc.want)
		}
	}
	if b, n := d.over(); b != 0.005 || n != 6 {
		t.Errorf("over: %d over %v, want 6 over 0.005", n, b)
	}
	if got, want := d.String(), "101 requests, p99 ≤ 50ms, 6 waited over 5ms"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
