package sidecar

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/engineapi"
	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/percentile"
	"github.com/kvp2p/kvp2p/internal/rawbench"
	"github.com/kvp2p/kvp2p/internal/wire"
	"google.golang.org/protobuf/proto"
)

// engineRig is a PD pair of sidecars, each with an engine attached through
// the engine API, moving rawbench.LoadBytes per load from the prefiller's
// region into the decoder's.
type engineRig struct {
	p, d   *sidecar
	ep, ed *fakeEngine
	keys   []wire.Key
	chunks []uint32
	n      int
	setup  []time.Duration // per load: the steps before it (see load)
	// The decoder's engine polls its load every `every` over poll.
	every time.Duration
	poll  func(*pb.StepRequest) *pb.StepResponse
}

func newEngineRig(b *testing.B) *engineRig {
	r := &engineRig{}
	r.p = startSidecarIn(b, shmDir(b), rawbench.Blocks, rawbench.BlockBytes, nil)
	r.d = startSidecarIn(b, shmDir(b), rawbench.Blocks, rawbench.BlockBytes, nil)
	r.ep, r.ed = attach(b, r.p), attach(b, r.d)
	img := make([]byte, rawbench.LoadBytes)
	for i := range rawbench.Blocks {
		k := nodetest.Key("engine-bench", i)
		r.keys = append(r.keys, k)
		r.chunks = append(r.chunks, uint32(i))
		copy(img[i*rawbench.BlockBytes:], rawbench.Bytes(k, rawbench.BlockBytes))
	}
	if err := os.WriteFile(r.p.region, img, 0o600); err != nil {
		b.Fatal(err)
	}
	r.every, r.poll = 500*time.Microsecond, r.ed.mustStep
	if os.Getenv("KVP2P_BENCH_POLL") != "" {
		r.every, _ = time.ParseDuration(os.Getenv("KVP2P_BENCH_POLL"))
		r.poll = stepSocket(b, r.d, r.ed)
	}
	return r
}

// shmDir is a directory for a region file where vLLM keeps its own, in
// /dev/shm (memory), if there is one: in the test's temporary directory
// the regions may be files on disk, whose written pages the kernel writes
// back, which no engine's region costs (and raw TCP does not pay).
func shmDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/dev/shm", "kvp2p-bench-")
	if err != nil {
		b.Logf("no /dev/shm (%v): regions in the test's temporary directory", err)
		return b.TempDir()
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// load runs one PD transfer: the prefiller stores every block, the decoder
// looks the first up and loads them all. It returns the load's time, from
// the step that submits it to the step that reports it, as the decoder's
// engine sees it (polling once per 500 µs, a fast scheduler step); the
// steps before it (the store, the new request, the lookup: scheduler
// steps of their own in an engine) are timed apart, in r.setup.
func (r *engineRig) load(b *testing.B) time.Duration {
	r.n++
	kv := fmt.Sprintf("kv-%d", r.n)
	pre, dec := "pre-"+kv, "dec-"+kv
	t0 := time.Now()
	sj, sresp := r.ep.submitStore(pre, &pb.TransferParams{RemoteDecoder: remoteOf(b, r.d), KvRequestId: kv}, r.keys, r.chunks...)
	r.ed.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: dec, Params: &pb.TransferParams{RemotePrefiller: remoteOf(b, r.p), KvRequestId: kv}}}})
	if v := r.ed.lookUntil(dec, r.keys[0]); v[len(v)-1] != pb.Verdict_VERDICT_HIT {
		b.Fatalf("PD lookup: %v", v)
	}
	j := r.ed.job(dec, r.keys, r.chunks...)
	start := time.Now()
	r.setup = append(r.setup, start.Sub(t0))
	resp := r.ed.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})
	for done := false; !done; {
		for _, d := range resp.Finished {
			if d.JobId == j.JobId {
				if !d.Success {
					b.Fatalf("load: %s", d.Reason)
				}
				done = true
			}
		}
		if !done {
			<-time.After(r.every)
			resp = r.poll(&pb.StepRequest{})
		}
	}
	el := time.Since(start)
	if d := r.ep.waitJob(sj, sresp); !d.Success {
		b.Fatalf("store: %s", d.Reason)
	}
	r.ep.mustStep(&pb.StepRequest{Finished: []string{pre}})
	r.ed.mustStep(&pb.StepRequest{Finished: []string{dec}})
	return el
}

func (r *engineRig) check(b *testing.B) {
	for i, k := range r.keys {
		if !bytes.Equal(readChunk(b, r.d, r.chunks[i]), rawbench.Bytes(k, rawbench.BlockBytes)) {
			b.Fatalf("chunk %d in the decoder's region differs", i)
		}
	}
}

// BenchmarkEngineLoadVsRaw alternates one 64 MiB PD load between two
// regions through two sidecars and the engine API with one raw TCP copy of
// the same bytes, and reports the load's throughput as a fraction of raw
// TCP's (x_raw), measured in the same run; and, apart, the mean time of
// the steps before each load (engine_setup_ms: store, new request, lookup).
// The decoder's engine polls for the load's result every 500 µs over gRPC;
// KVP2P_BENCH_POLL=2ms polls that often over the step socket instead, as
// the plugin does (poll_interval_s): on two cores the polls' CPU competes
// with the data path's.
func BenchmarkEngineLoadVsRaw(b *testing.B) {
	er, rr := newEngineRig(b), rawbench.NewRaw(b, rawbench.LoadBytes, rawbench.BlockBytes)
	var loads, raws []time.Duration
	load := func(b *testing.B) time.Duration { d := er.load(b); loads = append(loads, d); return d }
	raw := func(b *testing.B) time.Duration { d := rr.Copy(b); raws = append(raws, d); return d }
	rawbench.Interleave(b, rawbench.LoadBytes, "engine", load, "raw", raw, "x_raw")
	er.check(b)
	// The timed loads' (interleave runs each once before it times them).
	sum := func(ds []time.Duration) (t time.Duration) {
		for _, d := range ds[len(ds)-b.N:] {
			t += d
		}
		return t
	}
	setup := sum(er.setup)
	b.ReportMetric(setup.Seconds()*1e3/float64(b.N), "engine_setup_ms")
	b.ReportMetric(sum(raws).Seconds()/(sum(loads)+setup).Seconds(), "x_raw_with_setup")
}

// BenchmarkEngineStep: one Step over the Unix socket from a Go client,
// looking up 0, 64 or 1024 keys (as a list, or packed in one field), with
// p50/p99 per call. The plain cases look up for a request without a P2P
// role (every key MISSes at once); the sourced ones, as bench/step.py
// does, for a request whose source is a second sidecar that holds none of
// the keys, so each lookup goes through the session (it answered MISS
// after the first step).
func BenchmarkEngineStep(b *testing.B) {
	for _, c := range []struct {
		n       int
		packed  bool
		sourced bool
	}{{0, false, false}, {64, false, false}, {64, true, false}, {1024, false, false}, {1024, true, false}, {1024, true, true}} {
		n := c.n
		name := fmt.Sprintf("keys=%d", n)
		if c.packed {
			name += "/packed"
		}
		if c.sourced {
			name += "/sourced"
		}
		b.Run(name, func(b *testing.B) {
			s := startSidecar(b, nil)
			e := attach(b, s)
			var params *pb.TransferParams
			if c.sourced {
				params = &pb.TransferParams{RemoteKvSource: remoteOf(b, startSidecar(b, nil)), KvRequestId: "kv"}
			}
			req := &pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: "r"}}, EndStep: true}
			for i := range n {
				k := nodetest.Key("step", i)
				req.Lookups[0].Keys = append(req.Lookups[0].Keys, k[:])
			}
			if c.packed {
				req.Lookups[0].KeysPacked = bytes.Join(req.Lookups[0].Keys, nil)
				req.Lookups[0].Keys = nil
				req.Lookups[0].PackedVerdicts = true
			}
			if n == 0 {
				req.Lookups = nil
			}
			// A request without a P2P role: every lookup is a MISS, decided
			// in the sidecar's loop, which is what one step costs.
			e.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "r", Params: params}}})
			if c.sourced { // until the source has answered every key
				for e.mustStep(req).Lookups[0].VerdictsPacked[n-1] == byte(pb.Verdict_VERDICT_RETRY) {
					<-time.After(time.Millisecond)
				}
			}
			step := e.mustStep
			if c.sourced { // as the Python client steps: over the step socket
				step = stepSocket(b, s, e)
			}
			lat := make([]float64, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				step(req)
				lat = append(lat, float64(time.Since(t0).Microseconds()))
			}
			b.StopTimer()
			b.ReportMetric(percentile.Of(lat, 50), "p50_us")
			b.ReportMetric(percentile.Of(lat, 99), "p99_us")
		})
	}
}

// stepSocket serves s's step socket and returns a step over it.
func stepSocket(b *testing.B, s *sidecar, e *fakeEngine) func(*pb.StepRequest) *pb.StepResponse {
	path := engineapi.StepSocketPath(s.socket)
	ln, err := engineapi.ListenUnix(path)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.sc.ServeSteps(ln) }() // returns when the sidecar stops
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var out, in []byte
	return func(req *pb.StepRequest) *pb.StepResponse {
		req.Registration = e.reg
		out, err = proto.MarshalOptions{}.MarshalAppend(append(out[:0], 0, 0, 0, 0), req)
		if err != nil {
			b.Fatal(err)
		}
		binary.LittleEndian.PutUint32(out, uint32(len(out)-4))
		if _, err := c.Write(out); err != nil {
			b.Fatal(err)
		}
		var hdr [4]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			b.Fatal(err)
		}
		in = slices.Grow(in[:0], int(binary.LittleEndian.Uint32(hdr[:])))[:binary.LittleEndian.Uint32(hdr[:])]
		if _, err := io.ReadFull(c, in); err != nil {
			b.Fatal(err)
		}
		if in[0] != 0 {
			b.Fatalf("step: code %d: %s", in[0], in[1:])
		}
		resp := new(pb.StepResponse)
		if err := proto.Unmarshal(in[1:], resp); err != nil {
			b.Fatal(err)
		}
		return resp
	}
}
