package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseRates reads positive request rates separated by commas.
func ParseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 || r > 10000 {
			return nil, fmt.Errorf("%q: want rates in (0, 10000]", f)
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseSize reads a byte count: digits with an optional B, KiB, MiB, GiB,
// KB, MB or GB suffix.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q: want a size such as 256MiB", s)
	}
	return n * mult, nil
}
