package status

import (
	"fmt"
	"math"
)

// Dur formats seconds for people: 850µs, 12ms, 1.5s, 2m05s.
func Dur(sec float64) string {
	switch {
	case sec < 0:
		return "never"
	case sec < 0.001:
		return fmt.Sprintf("%.0fµs", sec*1e6)
	case sec < 1:
		return fmt.Sprintf("%.0fms", sec*1000)
	case sec < 60:
		return fmt.Sprintf("%.1fs", sec)
	case sec < 3600:
		m := math.Floor(sec / 60)
		return fmt.Sprintf("%.0fm%02.0fs", m, math.Floor(sec-60*m))
	}
	h := math.Floor(sec / 3600)
	return fmt.Sprintf("%.0fh%02.0fm", h, math.Floor((sec-3600*h)/60))
}

// Bytes formats a byte count: 512 B, 3.0 KiB, 1.5 MiB.
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, suffix := float64(n), "KMGTPE"
	i := -1
	for f >= unit && i < len(suffix)-1 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, suffix[i])
}
