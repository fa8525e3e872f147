package scenario

import (
	"testing"
	"time"
)

func TestFaultString(t *testing.T) {
	for _, tc := range []struct {
		f    Fault
		want string
	}{
		{Fault{At: 5 * time.Second, Kind: Slow, Target: Target{Pod: "a", First: 5, Last: 5}, BytesPerSec: 16 << 20}, "5s slow a/5 16 MiB/s"},
		{Fault{At: 5 * time.Second, Kind: Slow, Target: Target{Pod: "a", All: true}, BytesPerSec: 3 << 10}, "5s slow a/* 3 KiB/s"},
		{Fault{At: 5 * time.Second, Kind: Slow, Target: Target{Pod: "a", First: 1, Last: 2}, BytesPerSec: 1000}, "5s slow a/1-2 1000 B/s"},
		{Fault{At: 1500 * time.Millisecond, Kind: Delay, Target: Target{Pod: "a"}, Latency: 20 * time.Millisecond}, "1.5s delay a/0 +20ms"},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
