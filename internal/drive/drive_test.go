package drive

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
	"github.com/kvp2p/kvp2p/internal/workload"
)

const ms = time.Millisecond

// TestSteps: a step every period until end, then last once; a late step
// restarts the schedule instead of making a burst.
func TestSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		zero := time.Now()
		var nows, late []time.Duration
		lastAt := time.Duration(-1)
		err := Steps(context.Background(), zero, 60*ms, 10*ms, func(now time.Duration, due time.Time) error {
			nows = append(nows, now)
			late = append(late, time.Since(due))
			if now == 20*ms {
				time.Sleep(15 * ms) // a slow step: the next is due at 30 ms, runs at 35 ms
			}
			return nil
		}, func(now time.Duration) { lastAt = now })
		if err != nil {
			t.Fatal(err)
		}
		if want := []time.Duration{0, 10 * ms, 20 * ms, 35 * ms, 45 * ms, 55 * ms}; !slices.Equal(nows, want) {
			t.Errorf("steps at %v, want %v", nows, want)
		}
		if slices.ContainsFunc(late, func(d time.Duration) bool { return d != 0 }) {
			t.Errorf("late %v: every step starts when due once the schedule restarts", late)
		}
		if lastAt != 65*ms {
			t.Errorf("last at %v, want 65ms", lastAt)
		}
	})
}

// TestStepsStops: ctx's end and a step's error end the loop.
func TestStepsStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		err := Steps(ctx, time.Now(), time.Hour, 10*ms, func(time.Duration, time.Time) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		}, func(time.Duration) { t.Error("last called") })
		if !errors.Is(err, context.Canceled) || n != 3 {
			t.Errorf("err %v after %d steps", err, n)
		}
		boom := errors.New("boom")
		err = Steps(context.Background(), time.Now(), time.Hour, 10*ms, func(time.Duration, time.Time) error { return boom }, nil)
		if !errors.Is(err, boom) {
			t.Errorf("err %v, want the step's", err)
		}
	})
}

// fakeNode hits from its hitAt-th lookup on; it records the requests.
type fakeNode struct {
	workload.Node // only the calls Warm makes are implemented
	hitAt         int
	lookups       int
	made, ended   []string
	refuse        bool
}

func (f *fakeNode) NewRequest(id string, _ loads.TransferParams) error {
	if f.refuse {
		return errors.New("refused")
	}
	f.made = append(f.made, id)
	return nil
}

func (f *fakeNode) Lookup(string, wire.Key) session.Verdict {
	if f.lookups++; f.lookups >= f.hitAt {
		return session.Hit
	}
	return session.Miss
}

func (f *fakeNode) RequestFinished(id string) { f.ended = append(f.ended, id) }

// TestWarm: a fresh request per try until a lookup hits, each finished;
// false at the deadline; an error when the request is refused.
func TestWarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := workload.Source{ID: "a/0", Host: "h", Port: 1}
		nd := &fakeNode{hitAt: 3}
		start := time.Now()
		hit, err := Warm(context.Background(), nd, src, "warm", start.Add(time.Second), 5*ms)
		if err != nil || !hit {
			t.Fatalf("hit %v, err %v", hit, err)
		}
		if want := []string{"warm-0", "warm-1", "warm-2"}; !slices.Equal(nd.made, want) || !slices.Equal(nd.ended, want) {
			t.Errorf("made %v, ended %v, want %v", nd.made, nd.ended, want)
		}
		if el := time.Since(start); el != 10*ms {
			t.Errorf("took %v, want two retries (10ms)", el)
		}
		nd = &fakeNode{hitAt: 1 << 30}
		if hit, err := Warm(context.Background(), nd, src, "w", time.Now().Add(50*ms), 5*ms); hit || err != nil {
			t.Errorf("never hits: hit %v, err %v", hit, err)
		}
		if _, err := Warm(context.Background(), &fakeNode{refuse: true}, src, "w", time.Now().Add(50*ms), 5*ms); err == nil {
			t.Error("refused request: no error")
		}
	})
}

// TestSleep: the full wait, or ctx's error at once.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(context.Background(), 30*ms); err != nil || time.Since(start) != 30*ms {
			t.Errorf("err %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("err %v", err)
		}
	})
}
