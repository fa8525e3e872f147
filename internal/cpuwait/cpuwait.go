package cpuwait

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// Meter is a sample of the counter; see the package comment.
type Meter struct {
	ok    bool
	total time.Duration // "some" total at the start
	at    time.Time
}

// Start samples the counter now; ok is false where there is none.
func Start() Meter {
	t, ok := readCPUSome()
	return Meter{ok: ok, total: t, at: time.Now()}
}

// Share is the fraction of the wall time since start during which some
// task waited for a CPU; ok is false where the kernel does not say.
func (c Meter) Share() (float64, bool) {
	t, ok := readCPUSome()
	el := time.Since(c.at)
	if !c.ok || !ok || el <= 0 {
		return 0, false
	}
	return min(float64(t-c.total)/float64(el), 1), true
}

// readCPUSome reads the "some" line's total (µs) of /proc/pressure/cpu.
func readCPUSome() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	return parseCPUSome(b)
}

// parseCPUSome finds total= on the line starting with "some".
func parseCPUSome(b []byte) (time.Duration, bool) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("some ")) {
			continue
		}
		for _, f := range bytes.Fields(line) {
			if v, ok := bytes.CutPrefix(f, []byte("total=")); ok {
				n, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil || n < 0 {
					return 0, false
				}
				return time.Duration(n) * time.Microsecond, true
			}
		}
	}
	return 0, false
}
