package loads_test

import (
	"fmt"
	"testing"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// BenchmarkTickIdle: one node's Tick with n ready sessions and none of
// their timers due. With timers by deadline its cost does not grow with n.
//
//	go test ./internal/loads -run '^$' -bench TickIdle
func BenchmarkTickIdle(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			f := newFleet(b)
			tm := loads.PresetTimers(health.PerPeer)
			tm.MaxPeers = 2 * n
			c := f.node("10.0.255.1:7777", sim.NodeOpts{Timers: &tm})
			for i := range n {
				host := fmt.Sprintf("10.1.%d.%d", i/250, i%250)
				f.node(host+":7777", sim.NodeOpts{})
				f.connect(c, host, 7777)
			}
			if _, _, live := c.T.Held(); live != n {
				b.Fatalf("%d sessions, want %d", live, n)
			}
			now := f.net.Now
			for b.Loop() {
				c.T.Tick(now)
			}
		})
	}
}
