package cpuwait

import (
	"testing"
	"time"
)

func TestParseCPUSome(t *testing.T) {
	in := "some avg10=95.14 avg60=83.26 avg300=73.58 total=3274072058\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	d, ok := parseCPUSome([]byte(in))
	if !ok || d != 3274072058*time.Microsecond {
		t.Fatalf("got %v %v", d, ok)
	}
	for _, bad := range []string{"", "full total=5\n", "some avg10=1 total=x\n", "some total=-3\n"} {
		if _, ok := parseCPUSome([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}
