package benchtest

import (
	"context"
	"testing"
	"time"
)

// TestOracle checks the oracle's grants: first come first served among
// those that fit, never over k nor over the group limit, a slot given back
// going to the next that fits, and a wait given up leaving no slot held.
func TestOracle(t *testing.T) {
	o := newOracle(2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type ask struct {
		node, zone string
		done       chan error
	}
	asks := []ask{{"a", "z1", nil}, {"b", "z1", nil}, {"c", "z2", nil}, {"d", "z3", nil}}
	for i := range asks {
		asks[i].done = make(chan error, 1)
		go func(a ask) { a.done <- o.acquire(ctx, a.node, a.zone) }(asks[i])
		time.Sleep(20 * time.Millisecond) // in this order
	}
	granted := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			o.mu.Lock()
			n := len(o.held)
			ok := n == len(want)
			for _, w := range want {
				ok = ok && o.held[w] != nil
			}
			o.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("held %d, want %v", n, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	granted("a", "c") // b's zone is full, d is over k
	o.rebooting("a", "boot-1")
	if boot, ok := o.holding("a"); !ok || boot != "boot-1" {
		t.Fatalf("holding(a) = %q, %v", boot, ok)
	}
	o.release("a")
	granted("c", "b") // b asked before d and fits again
	o.release("c")
	granted("b", "d")
	o.release("b")
	o.release("d")

	// A wait given up is no slot.
	wctx, wcancel := context.WithCancel(ctx)
	o.mu.Lock()
	o.held["x"], o.held["y"] = &oracleHold{zone: "z1", since: time.Now()}, &oracleHold{zone: "z2", since: time.Now()}
	o.perZone["z1"], o.perZone["z2"] = 1, 1
	o.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- o.acquire(wctx, "e", "z3") }()
	time.Sleep(20 * time.Millisecond)
	wcancel()
	if err := <-done; err == nil {
		t.Fatal("acquire returned no error after its context ended")
	}
	o.release("x")
	granted("y")
	given, held, err := o.slots(ctx)
	if err != nil || held != 1 || len(given) != 5 {
		t.Fatalf("slots: %d given, %d held, %v; want 5 given, 1 held", len(given), held, err)
	}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	for _, a := range asks {
		if err := <-a.done; err != nil {
			t.Fatalf("acquire %s: %v", a.node, err)
		}
	}
}

// TestOracleCheck checks that check finds a broken limit in the spans
// alone, and that a slot given back unused counts against the limits but
// is not one of the roll's slots.
func TestOracleCheck(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name   string
		spans  []oracleSpan
		broken bool
	}{
		{"hand-off at one instant", []oracleSpan{
			{node: "a", zone: "z1", from: at(0), to: at(2), used: true},
			{node: "b", zone: "z1", from: at(2), to: at(4), used: true},
		}, false},
		{"two in one zone", []oracleSpan{
			{node: "a", zone: "z1", from: at(0), to: at(2), used: true},
			{node: "b", zone: "z1", from: at(1), to: at(3), used: true},
		}, true},
		{"three over k", []oracleSpan{
			{node: "a", zone: "z1", from: at(0), to: at(3), used: true},
			{node: "b", zone: "z2", from: at(1), to: at(3), used: true},
			{node: "c", zone: "z3", from: at(2), to: at(3), used: true},
		}, true},
		{"an unused slot still counts", []oracleSpan{
			{node: "a", zone: "z1", from: at(0), to: at(2), used: true},
			{node: "b", zone: "z1", from: at(1), to: at(1), used: false},
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOracle(2, 1)
			o.ended = tt.spans
			if err := o.check(); (err != nil) != tt.broken {
				t.Fatalf("check() = %v, want broken %v", err, tt.broken)
			}
		})
	}

	o := newOracle(2, 1)
	o.held["a"], o.perZone["z1"] = &oracleHold{zone: "z1", since: t0}, 1
	o.releaseLocked("a", false)
	done, held, _ := o.slots(context.Background())
	if len(done) != 0 || held != 0 || len(o.ended) != 1 {
		t.Fatalf("after an unused release: %d slots, %d held, %d spans; want 0, 0, 1", len(done), held, len(o.ended))
	}
}
