package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Goroutines cannot be counted from outside a Go process, so the lab asks
// each serve: every rank's config sets metrics_addr to a port on the
// loopback of its host's namespace, and the node's registry (one per node,
// internal/prom.NewRegistry) carries the Go collector's go_goroutines
// and the node's kvp2p_sessions. The lab's own process lives in the
// machine's namespace, where 10.200.0.0/16 does not exist; it dials from
// a thread that has entered the host's namespace instead.

const (
	// MetricsBase is the first rank's metrics port (its serve's
	// metrics_addr, on its host namespace's loopback); rank i's is
	// MetricsBase+i. Below the ephemeral range (32768-60999), so an
	// outgoing connection of a process in the namespace can never hold
	// it when a serve restarts.
	MetricsBase  = 20000
	metricsPorts = 10000
	scrapeWait   = 2 * time.Second
	// perSession is the goroutines a session holds while it lives: the
	// control connection's reader and writer, the data connection's
	// reader and writer. The leak check subtracts them, so that a
	// process that ends the run with more sessions than it began with
	// (a PD store's reverse session, a peer re-dialled) is not a leak.
	perSession = 4
	// leakSlack is the growth of a process's goroutines, beyond its
	// sessions', that the soak tolerates: a scrape's own connection, a
	// dial in flight.
	leakSlack = 8
	// settleMax bounds the wait, after the drain, for the goroutines of
	// sessions being torn down to end (a session closed by a heartbeat
	// timeout takes up to the vLLM presets' 10 s).
	settleMax = 15 * time.Second
)

// gorSample is one scrape of a serve.
type gorSample struct {
	goroutines int
	sessions   int // every state: connecting, ready, ended
}

// own is the goroutines the sample holds beyond its sessions': what must
// not grow over a run.
func (s gorSample) own() int { return s.goroutines - perSession*s.sessions }

// sysSetns is setns(2)'s number; the syscall package does not define it.
const sysSetnsAMD64, sysSetnsARM64 = 308, 268

func setnsNumber() (uintptr, error) {
	switch runtime.GOARCH {
	case "amd64":
		return sysSetnsAMD64, nil
	case "arm64":
		return sysSetnsARM64, nil
	}
	return 0, fmt.Errorf("setns on %s: the lab knows its number on amd64 and arm64 only", runtime.GOARCH)
}

// dialInNS dials addr (tcp) from inside network namespace ns. The socket
// is made by a goroutine locked to a thread that has entered ns; a socket
// stays in the namespace it was made in. The goroutine never unlocks its
// thread, so the runtime ends that thread with it: no other goroutine
// ever runs in ns.
func dialInNS(ctx context.Context, ns, addr string) (net.Conn, error) {
	nr, err := setnsNumber()
	if err != nil {
		return nil, err
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if _, _, e := syscall.RawSyscall(nr, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
			ch <- result{nil, fmt.Errorf("entering namespace %s: %w", ns, e)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// scrape reads the rank's goroutines and sessions from its /metrics.
func scrape(ctx context.Context, ns string, port int) (gorSample, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeWait)
	defer cancel()
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return dialInNS(ctx, ns, addr) },
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return gorSample{}, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return gorSample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return gorSample{}, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseGoroutines(io.LimitReader(resp.Body, 4<<20))
}

// parseGoroutines reads go_goroutines and the sum of kvp2p_sessions over
// its states from Prometheus' text format. Both must be there: a serve
// without them cannot be checked, and saying so beats passing silently.
func parseGoroutines(r io.Reader) (gorSample, error) {
	var s gorSample
	seenG, seenS := false, false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		metric, _, _ := strings.Cut(name, "{")
		if metric != "go_goroutines" && metric != "kvp2p_sessions" {
			continue
		}
		val, _, _ := strings.Cut(strings.TrimSpace(rest), " ") // a timestamp may follow
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || v < 0 || v > 1e9 || v != float64(int(v)) {
			return gorSample{}, fmt.Errorf("%s: value %q is not a count", metric, val)
		}
		if metric == "go_goroutines" {
			s.goroutines, seenG = int(v), true
		} else {
			s.sessions += int(v)
			seenS = true
		}
	}
	if err := sc.Err(); err != nil {
		return gorSample{}, err
	}
	if !seenG || !seenS {
		return gorSample{}, errors.New("no go_goroutines or kvp2p_sessions in /metrics")
	}
	return s, nil
}
