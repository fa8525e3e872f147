package faultnet

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestPauseData: the bytes allowed pass, the next write holds (whole)
// until ResumeData, and a held write fails when its connection closes.
func TestPauseData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inj := NewInjector()
		c, a, far := dataConn(t, inj, time.Now())
		defer far.Close()
		chunk := chunkFrame(1, 64)
		paused := inj.PauseData("src", int64(len(chunk))+10)
		if _, err := c.Write(chunk); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := c.Write(chunkFrame(1, 64)); done <- err }()
		synctest.Wait()
		select {
		case <-paused:
		default:
			t.Fatal("the write past the allowance did not hold")
		}
		select {
		case err := <-done:
			t.Fatalf("the held write returned (%v) before the resume", err)
		default:
		}
		a.mu.Lock()
		got := a.bytes
		a.mu.Unlock()
		if got != len(chunk) {
			t.Errorf("%d bytes arrived during the pause, want the %d allowed (a write is never split)", got, len(chunk))
		}
		inj.ResumeData("src")
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		inj.PauseData("src", 0)
		go func() { _, err := c.Write(chunkFrame(1, 64)); done <- err }()
		synctest.Wait()
		c.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("held write on a closed connection: %v, want net.ErrClosed", err)
		}
	})
}

// TestCorruptNextChunk: one byte of the next chunk's payload arrives
// flipped, the writer's buffer is untouched, and later chunks are intact.
func TestCorruptNextChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inj := NewInjector()
		srcEnd, dstEnd := net.Pipe()
		c := inj.Wrap(srcEnd, "src")
		attach, err := wire.Append(nil, &wire.DataAttach{PeerID: "dst", Incarnation: 1})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = dstEnd.Write(attach) }()
		if _, err := c.Read(make([]byte, len(attach))); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []byte
		go func() {
			b, _ := io.ReadAll(dstEnd)
			mu.Lock()
			got = b
			mu.Unlock()
		}()
		ack := nodetest.Frame(t, &wire.ProbeAck{Seq: 1})
		done := inj.CorruptNextChunk("src")
		chunk := chunkFrame(7, 64)
		orig := bytes.Clone(chunk)
		for _, b := range [][]byte{ack, chunk, chunk} {
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-done:
		default:
			t.Fatal("not reported done")
		}
		if !bytes.Equal(chunk, orig) {
			t.Error("the writer's buffer was changed")
		}
		c.Close()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := append(append(append([]byte(nil), ack...), chunk...), chunk...)
		if len(got) != len(want) {
			t.Fatalf("%d bytes arrived, want %d", len(got), len(want))
		}
		var diff []int
		for i := range got {
			if got[i] != want[i] {
				diff = append(diff, i)
			}
		}
		if head := len(ack) + wire.ChunkHeaderLen; len(diff) != 1 || diff[0] != head+32 {
			t.Errorf("bytes differ at %v, want only the first chunk's payload byte 32 (offset %d)", diff, head+32)
		}
	})
}
