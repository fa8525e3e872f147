package demo

import "testing"

// The meter reads the runtime's histogram and orders its figures.
func TestSchedMeter(t *testing.T) {
	m := startSched()
	done := make(chan struct{})
	for range 100 {
		go func() { done <- struct{}{} }()
	}
	for range 100 {
		<-done
	}
	p99, most, ok := m.quantiles()
	if !ok {
		t.Skip("the runtime offers no " + schedMetric)
	}
	if p99 > most {
		t.Fatalf("p99 %v above the largest %v", p99, most)
	}
	if most == 0 {
		t.Fatalf("100 goroutines scheduled, no latency recorded")
	}
}
