package faultnet

import (
	"encoding/binary"
	"net"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Two faults of a rank's data writes that no scenario names but tests of
// the node need at a precise point of a load: a pause after so many bytes
// (a load caught half way), and one corrupted chunk (the CRC check). Like
// the others they act on the data connections the rank is the local end
// of, and they are armed per rank label.

// dataPause is a rank's armed pause: left more bytes of data writes pass,
// then every write holds until resumed is closed.
type dataPause struct {
	left    int64
	paused  chan struct{} // closed when a write first holds
	resumed chan struct{} // closed by ResumeData
}

// PauseData lets n more bytes of the rank's data-connection writes
// through, then holds each later write (whole: a write is never split)
// until ResumeData or the connection's close. The returned channel is
// closed when a write first holds.
func (f *Injector) PauseData(label string, n int64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pauses == nil {
		f.pauses = map[string]*dataPause{}
	}
	p := &dataPause{left: n, paused: make(chan struct{}), resumed: make(chan struct{})}
	f.pauses[label] = p
	return p.paused
}

// ResumeData lets the rank's held and later data writes through.
func (f *Injector) ResumeData(label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pauses[label]; p != nil {
		close(p.resumed)
		delete(f.pauses, label)
	}
}

// CorruptNextChunk flips one byte in the middle of the payload of the next
// Chunk the rank writes on a data connection, in a copy (the writer's
// buffer, an arena slot, is never touched). The returned channel is closed
// once it did.
func (f *Injector) CorruptNextChunk(label string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.corrupt == nil {
		f.corrupt = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	f.corrupt[label] = done
	return done
}

// pauseData holds a data write of n bytes while the rank's pause says so.
// It runs with wmu held, as the write it holds.
func (c *faultConn) pauseData(n int) error {
	for {
		c.inj.mu.Lock()
		p := c.inj.pauses[c.local]
		if !c.isData || p == nil {
			c.inj.mu.Unlock()
			return nil
		}
		if p.left >= int64(n) {
			p.left -= int64(n)
			c.inj.mu.Unlock()
			return nil
		}
		select {
		case <-p.paused:
		default:
			close(p.paused)
		}
		resumed := p.resumed
		c.inj.mu.Unlock()
		select {
		case <-resumed:
		case <-c.closed:
			return net.ErrClosed
		}
	}
}

// armCorrupt, given the head of a frame about to be written, arms the
// flip of one payload byte if it is a Chunk and the rank asked for one:
// c.flipAt counts the bytes still to be emitted before that byte (the
// head itself included). Called from decideOut, with wmu held.
func (c *faultConn) armCorrupt(head []byte) {
	if len(head) < wire.ChunkHeaderLen || wire.Type(head[5]) != wire.TypeChunk {
		return
	}
	c.inj.mu.Lock()
	defer c.inj.mu.Unlock()
	done := c.inj.corrupt[c.local]
	if done == nil || !c.isData {
		return
	}
	payload := int64(binary.BigEndian.Uint32(head[6+16:]))
	if payload == 0 {
		return
	}
	delete(c.inj.corrupt, c.local)
	frame := int64(binary.BigEndian.Uint32(head)) + 4
	c.flipAt, c.flipDone = frame+payload/2, done
}

// corruptOut passes b on, with the armed byte flipped in a copy if b holds
// it. Called for every emitted slice of a write, with wmu held.
func (c *faultConn) corruptOut(b []byte) []byte {
	if c.flipDone == nil {
		return b
	}
	if c.flipAt >= int64(len(b)) {
		c.flipAt -= int64(len(b))
		return b
	}
	q := append([]byte(nil), b...)
	q[c.flipAt] ^= 0x5a
	close(c.flipDone)
	c.flipDone = nil
	return q
}
