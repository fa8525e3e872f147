package engineapi

import (
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAttachSilentButRunnableEngine: an engine silent past EngineTimeout
// whose process waits for a CPU (runnable) is given starvedGrace more
// timeouts before it is taken for gone; one that is not runnable (frozen,
// idle) is gone at the first. The server learns the engine's process from
// the Unix socket (SO_PEERCRED): here, this test's own.
func TestAttachSilentButRunnableEngine(t *testing.T) {
	const timeout = 60 * time.Millisecond
	for _, tc := range []struct {
		name     string
		runnable bool
		min      time.Duration
	}{
		{"frozen", false, timeout},
		{"starved", true, (starvedGrace + 1) * timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			s := New(f, Options{EngineTimeout: timeout, PingInterval: time.Hour})
			var mu sync.Mutex
			var asked []int
			s.runnable = func(pid int) bool {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, pid)
				return tc.runnable
			}
			st := attachRegistered(t, t.Context(), serveServer(t, s))
			t0 := time.Now()
			var err error
			for { // the engine never speaks again
				if _, err = st.Recv(); err != nil {
					break
				}
			}
			took := time.Since(t0)
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("stream ended with %v, want DeadlineExceeded", err)
			}
			if took < tc.min {
				t.Fatalf("ended after %v, want at least %v", took, tc.min)
			}
			<-f.detached
			mu.Lock()
			defer mu.Unlock()
			if len(asked) == 0 || asked[0] != os.Getpid() {
				t.Fatalf("runnable asked for %v, want this process %d", asked, os.Getpid())
			}
			if tc.runnable && len(asked) != starvedGrace {
				t.Fatalf("runnable asked %d times, want %d", len(asked), starvedGrace)
			}
		})
	}
}

// TestProcessRunnable: this test's process, spinning on a thread, is
// runnable; a pid that does not exist is not.
func TestProcessRunnable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	defer spin()()
	if !processRunnable(os.Getpid()) {
		t.Error("this process, with a spinning goroutine, is not runnable")
	}
	if processRunnable(0) || processRunnable(1<<30) {
		t.Error("no such process, yet runnable")
	}
}

// spin keeps a goroutine busy, so that this process is runnable, until
// the function it returns is called.
func spin() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
