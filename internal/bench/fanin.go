package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
)

// bench --fanin N: one consumer node loading from N producer nodes at once
// (the load's bytes split evenly among them), against N plain TCP streams
// into one receiver, interleaved with the other measurements run by run.

// fanIn is the consumer and its producers, each with a ready session.
type fanIn struct {
	cons  *benchNode
	prods []*benchNode
	keys  [][]node.Key // keys[i]: the blocks producer i holds
	n     int
}

func newFanIn(ctx context.Context, sources, blocks, block int) (f *fanIn, err error) {
	per := blocks / sources
	f = &fanIn{}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	if f.cons, err = startBenchNode(block, blocks+16, nil); err != nil {
		return nil, err
	}
	for i := range sources {
		p, err := startBenchNode(block, max(per, 16), nil)
		if err != nil {
			return nil, err
		}
		f.prods = append(f.prods, p)
		keys := make([]node.Key, per)
		for j := range keys {
			keys[j] = benchKey(fmt.Sprintf("fan%d", i), j)
			if err := p.m.PutBlock(keys[j], benchBlock(keys[j], block)); err != nil {
				return nil, err
			}
		}
		f.keys = append(f.keys, keys)
		if err := warmSession(ctx, f.cons, p); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// once submits every producer's load before waiting for any and returns
// the time until every load and store has its result.
func (f *fanIn) once(ctx context.Context) (time.Duration, error) {
	f.n++
	start := time.Now()
	loads := make(map[uint64]bool, len(f.prods))
	stores := make([]uint64, len(f.prods))
	for i, p := range f.prods {
		kv := fmt.Sprintf("fan%d-%d", f.n, i)
		p.m.NewRequest("p"+kv, node.TransferParams{RemoteDecoder: &node.Remote{KVRequestID: kv}})
		var err error
		if stores[i], err = p.m.SubmitStore("p"+kv, f.keys[i]); err != nil {
			return 0, err
		}
		f.cons.m.NewRequest("d"+kv, node.TransferParams{RemotePrefiller: remoteOf(p, kv)})
		lj, err := f.cons.m.SubmitLoad("d"+kv, f.keys[i])
		if err != nil {
			return 0, err
		}
		loads[lj] = true
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(loads) > 0 {
		for _, r := range f.cons.m.WaitFinished(wctx) {
			if loads[r.Job] {
				if !r.OK {
					return 0, fmt.Errorf("fan-in load failed: %s", r.Reason)
				}
				delete(loads, r.Job)
			}
		}
		if err := wctx.Err(); err != nil && len(loads) > 0 {
			return 0, fmt.Errorf("fan-in: %d loads without a result: %w", len(loads), err)
		}
	}
	for i, p := range f.prods {
		if r, err := waitJob(ctx, p.m, stores[i]); err != nil {
			return 0, err
		} else if !r.OK {
			return 0, fmt.Errorf("fan-in store failed: %s", r.Reason)
		}
	}
	el := time.Since(start)
	for i, p := range f.prods {
		kv := fmt.Sprintf("fan%d-%d", f.n, i)
		f.cons.m.RequestFinished("d" + kv)
		p.m.RequestFinished("p" + kv)
	}
	return el, nil
}

// check: the first and last block from every producer arrived intact.
func (f *fanIn) check(block int) error {
	for _, keys := range f.keys {
		for _, k := range []node.Key{keys[0], keys[len(keys)-1]} {
			if got, ok := f.cons.m.ReadBlock(k); !ok || string(got) != string(benchBlock(k, block)) {
				return fmt.Errorf("fan-in: block %x was not loaded intact", k[:4])
			}
		}
	}
	return nil
}

func (f *fanIn) close() {
	for _, p := range f.prods {
		p.stop()
	}
	if f.cons != nil {
		f.cons.stop()
	}
}

// rawFanIn is n plain TCP streams into one receiver on 127.0.0.1: per
// stream a writer goroutine copying its share of src in chunk-sized writes
// and a reader goroutine filling its share of dst.
type rawFanIn struct {
	wcs            []net.Conn
	src, dst       []byte
	startR, startW []chan struct{} // per stream: a copy starts
	got            chan error      // one per goroutine and copy
	wg             sync.WaitGroup
}

func newRawFanIn(n int, size int64, chunk int) (*rawFanIn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	r := &rawFanIn{src: make([]byte, size), dst: make([]byte, size), got: make(chan error, 2*n)}
	for i := range r.src {
		r.src[i] = byte(i >> 8)
	}
	share := int(size) / n
	for i := range n {
		wc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			r.close()
			return nil, err
		}
		rc, err := ln.Accept()
		if err != nil {
			wc.Close()
			r.close()
			return nil, err
		}
		sr, sw := make(chan struct{}), make(chan struct{})
		r.wcs, r.startR, r.startW = append(r.wcs, wc), append(r.startR, sr), append(r.startW, sw)
		dst, src := r.dst[i*share:(i+1)*share], r.src[i*share:(i+1)*share]
		r.wg.Add(2)
		go func() {
			defer r.wg.Done()
			defer rc.Close()
			for range sr {
				_, err := io.ReadFull(rc, dst)
				r.got <- err
			}
		}()
		go func() {
			defer r.wg.Done()
			for range sw {
				var err error
				for off := 0; off < len(src) && err == nil; off += chunk {
					_, err = wc.Write(src[off:min(off+chunk, len(src))])
				}
				r.got <- err
			}
		}()
	}
	return r, nil
}

func (r *rawFanIn) copyOnce() (time.Duration, error) {
	start := time.Now()
	for i := range r.wcs {
		r.startR[i] <- struct{}{}
		r.startW[i] <- struct{}{}
	}
	var first error
	for range 2 * len(r.wcs) {
		if err := <-r.got; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return 0, fmt.Errorf("raw fan-in: %w", first)
	}
	el := time.Since(start)
	if string(r.src[:4096]) != string(r.dst[:4096]) || string(r.src[len(r.src)-4096:]) != string(r.dst[len(r.dst)-4096:]) {
		return 0, errors.New("raw fan-in: bytes differ")
	}
	return el, nil
}

func (r *rawFanIn) close() {
	for i := range r.wcs {
		close(r.startR[i])
		close(r.startW[i])
		r.wcs[i].Close()
	}
	r.wg.Wait()
}
