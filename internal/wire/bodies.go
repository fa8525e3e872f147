package wire

import "encoding/binary"

// Bodies, one encode/decode pair per message, fields in wire order. The two
// halves of a pair must list the same fields in the same order; the golden
// test pins the result.

func (m *Hello) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "Hello"}
	e.u8(m.Version)
	e.str("PeerID", m.PeerID)
	e.u64(m.Incarnation)
	e.str("Domain", m.Domain)
	e.u32(m.BlockBytes)
	e.str("Fingerprint", m.Fingerprint)
	e.str("HashSeed", m.HashSeed)
	e.u32(m.MaxInflight)
	e.u32(m.MaxFrame)
	e.u64(m.Attempt)
	e.b = append(e.b, m.Secret[:]...)
	if e.err == nil {
		e.err = checkBlockBytes(m.BlockBytes, lim)
	}
	return e.b, e.err
}

func (m *Hello) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Hello"}
	m.Version = d.u8("Version")
	m.PeerID = d.str("PeerID")
	m.Incarnation = d.u64("Incarnation")
	m.Domain = d.str("Domain")
	m.BlockBytes = d.u32("BlockBytes")
	m.Fingerprint = d.str("Fingerprint")
	m.HashSeed = d.str("HashSeed")
	m.MaxInflight = d.u32("MaxInflight")
	m.MaxFrame = d.u32("MaxFrame")
	m.Attempt = d.u64("Attempt")
	copy(m.Secret[:], d.take("Secret", SecretSize))
	if d.err == nil {
		d.err = checkBlockBytes(m.BlockBytes, lim)
	}
	return d.finish()
}

// checkBlockBytes refuses a block size no arena could hold: zero, or more
// than this side is willing to reserve per slot.
func checkBlockBytes(n uint32, lim Limits) error {
	if n == 0 {
		return malformed("Hello.BlockBytes", "zero")
	}
	if n > lim.MaxBlockSize {
		return tooLarge("Hello.BlockBytes", "block size", uint64(n), lim.MaxBlockSize)
	}
	return nil
}

func (m *HelloAck) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "HelloAck"}
	e.str("PeerID", m.PeerID)
	e.u64(m.Incarnation)
	return e.b, e.err
}

func (m *HelloAck) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "HelloAck"}
	m.PeerID = d.str("PeerID")
	m.Incarnation = d.u64("Incarnation")
	return d.finish()
}

// The four Seq-only messages share one layout: a uint64.

func appendSeq(b []byte, seq uint64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(b, seq), nil
}

func decodeSeq(b []byte, lim Limits, msg string, seq *uint64) error {
	d := decoder{b: b, lim: lim, msg: msg}
	*seq = d.u64("Seq")
	return d.finish()
}

func (m *Ping) appendBody(b []byte, _ Limits) ([]byte, error)     { return appendSeq(b, m.Seq) }
func (m *Pong) appendBody(b []byte, _ Limits) ([]byte, error)     { return appendSeq(b, m.Seq) }
func (m *Probe) appendBody(b []byte, _ Limits) ([]byte, error)    { return appendSeq(b, m.Seq) }
func (m *ProbeAck) appendBody(b []byte, _ Limits) ([]byte, error) { return appendSeq(b, m.Seq) }

func (m *Ping) decodeBody(b []byte, lim Limits) error  { return decodeSeq(b, lim, "Ping", &m.Seq) }
func (m *Pong) decodeBody(b []byte, lim Limits) error  { return decodeSeq(b, lim, "Pong", &m.Seq) }
func (m *Probe) decodeBody(b []byte, lim Limits) error { return decodeSeq(b, lim, "Probe", &m.Seq) }
func (m *ProbeAck) decodeBody(b []byte, lim Limits) error {
	return decodeSeq(b, lim, "ProbeAck", &m.Seq)
}

func (m *Lookup) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "Lookup"}
	e.str("ReqID", m.ReqID)
	e.u64(m.Round)
	e.keys("Keys", m.Keys)
	return e.b, e.err
}

func (m *Lookup) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Lookup"}
	m.ReqID = d.str("ReqID")
	m.Round = d.u64("Round")
	m.Keys = d.keys("Keys")
	return d.finish()
}

func (m *LookupResp) appendBody(b []byte, lim Limits) ([]byte, error) {
	if len(m.Hits) != len(m.Keys) {
		return b, malformed("LookupResp.Hits", "length differs from Keys")
	}
	e := encoder{b: b, lim: lim, msg: "LookupResp"}
	e.str("ReqID", m.ReqID)
	e.u64(m.Round)
	e.keys("Keys", m.Keys)
	e.bits("Hits", m.Hits)
	return e.b, e.err
}

func (m *LookupResp) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "LookupResp"}
	m.ReqID = d.str("ReqID")
	m.Round = d.u64("Round")
	m.Keys = d.keys("Keys")
	m.Hits = d.bits("Hits")
	if d.err == nil && len(m.Hits) != len(m.Keys) {
		d.err = malformed("LookupResp.Hits", "length differs from Keys")
	}
	return d.finish()
}

func (m *LookupPending) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "LookupPending"}
	e.str("ReqID", m.ReqID)
	e.u64(m.Round)
	return e.b, e.err
}

func (m *LookupPending) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "LookupPending"}
	m.ReqID = d.str("ReqID")
	m.Round = d.u64("Round")
	return d.finish()
}

func (m *Fetch) appendBody(b []byte, lim Limits) ([]byte, error) {
	if len(m.Slots) != len(m.Keys) {
		return b, malformed("Fetch.Slots", "length differs from Keys")
	}
	e := encoder{b: b, lim: lim, msg: "Fetch"}
	e.str("ReqID", m.ReqID)
	e.u64(m.Round)
	e.u64(m.Job)
	e.keys("Keys", m.Keys)
	e.slots("Slots", m.Slots)
	return e.b, e.err
}

func (m *Fetch) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Fetch"}
	m.ReqID = d.str("ReqID")
	m.Round = d.u64("Round")
	m.Job = d.u64("Job")
	m.Keys = d.keys("Keys")
	m.Slots = d.slots("Slots")
	if d.err == nil && len(m.Slots) != len(m.Keys) {
		d.err = malformed("Fetch.Slots", "length differs from Keys")
	}
	return d.finish()
}

func (m *TransferDone) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "TransferDone"}
	e.str("ReqID", m.ReqID)
	e.u64(m.Round)
	e.u64(m.Job)
	e.boolean(m.Success)
	e.u64(m.Bytes)
	return e.b, e.err
}

func (m *TransferDone) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "TransferDone"}
	m.ReqID = d.str("ReqID")
	m.Round = d.u64("Round")
	m.Job = d.u64("Job")
	m.Success = d.boolean("Success")
	m.Bytes = d.u64("Bytes")
	return d.finish()
}

// Abort and AbortAck share one layout: ReqID, Round, Job.

func appendRoundRef(b []byte, lim Limits, msg, reqID string, round, job uint64) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: msg}
	e.str("ReqID", reqID)
	e.u64(round)
	e.u64(job)
	return e.b, e.err
}

func decodeRoundRef(b []byte, lim Limits, msg string, reqID *string, round, job *uint64) error {
	d := decoder{b: b, lim: lim, msg: msg}
	*reqID = d.str("ReqID")
	*round = d.u64("Round")
	*job = d.u64("Job")
	return d.finish()
}

func (m *Abort) appendBody(b []byte, lim Limits) ([]byte, error) {
	return appendRoundRef(b, lim, "Abort", m.ReqID, m.Round, m.Job)
}

func (m *Abort) decodeBody(b []byte, lim Limits) error {
	return decodeRoundRef(b, lim, "Abort", &m.ReqID, &m.Round, &m.Job)
}

func (m *AbortAck) appendBody(b []byte, lim Limits) ([]byte, error) {
	return appendRoundRef(b, lim, "AbortAck", m.ReqID, m.Round, m.Job)
}

func (m *AbortAck) decodeBody(b []byte, lim Limits) error {
	return decodeRoundRef(b, lim, "AbortAck", &m.ReqID, &m.Round, &m.Job)
}

// Goodbye.Reason and Error.Code pass through unchecked: a peer may know a
// reason or code this side does not, and the caller treats an unknown one as
// unspecified rather than failing the session over its name.

func (m *Goodbye) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "Goodbye"}
	e.u8(uint8(m.Reason))
	e.str("Detail", m.Detail)
	return e.b, e.err
}

func (m *Goodbye) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Goodbye"}
	m.Reason = GoodbyeReason(d.u8("Reason"))
	m.Detail = d.str("Detail")
	return d.finish()
}

func (m *DataAttach) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "DataAttach"}
	e.str("PeerID", m.PeerID)
	e.u64(m.Incarnation)
	e.u64(m.Attempt)
	e.b = append(e.b, m.MAC[:]...)
	return e.b, e.err
}

func (m *DataAttach) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "DataAttach"}
	m.PeerID = d.str("PeerID")
	m.Incarnation = d.u64("Incarnation")
	m.Attempt = d.u64("Attempt")
	copy(m.MAC[:], d.take("MAC", SecretSize))
	return d.finish()
}

// check refuses a chunk the receiver could not place: more payload than
// lim.MaxChunk, or an end past the largest block (which also keeps
// Offset+Len from overflowing in the caller's arithmetic).
func (c *Chunk) check(lim Limits) error {
	if c.Len > lim.MaxChunk {
		return tooLarge("Chunk.Len", "payload", uint64(c.Len), lim.MaxChunk)
	}
	if end := uint64(c.Offset) + uint64(c.Len); end > uint64(lim.MaxBlockSize) {
		return tooLarge("Chunk.Offset", "chunk end", end, lim.MaxBlockSize)
	}
	return nil
}

// appendChunk appends the fixed 24-byte chunk body; shared with
// AppendChunkHeader, which must not go through the encoder's error path.
func appendChunk(b []byte, c *Chunk) []byte {
	b = binary.BigEndian.AppendUint64(b, c.Job)
	b = binary.BigEndian.AppendUint32(b, c.Block)
	b = binary.BigEndian.AppendUint32(b, c.Offset)
	b = binary.BigEndian.AppendUint32(b, c.Len)
	return binary.BigEndian.AppendUint32(b, c.CRC)
}

func (c *Chunk) appendBody(b []byte, lim Limits) ([]byte, error) {
	if err := c.check(lim); err != nil {
		return b, err
	}
	return appendChunk(b, c), nil
}

func (c *Chunk) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Chunk"}
	c.Job = d.u64("Job")
	c.Block = d.u32("Block")
	c.Offset = d.u32("Offset")
	c.Len = d.u32("Len")
	c.CRC = d.u32("CRC")
	if d.err == nil {
		d.err = c.check(lim)
	}
	return d.finish()
}

func (m *Progress) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "Progress"}
	e.u64(m.Job)
	e.u64(m.Bytes)
	e.boolean(m.Queued)
	return e.b, e.err
}

func (m *Progress) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Progress"}
	m.Job = d.u64("Job")
	m.Bytes = d.u64("Bytes")
	m.Queued = d.boolean("Queued")
	return d.finish()
}

func (m *Done) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "Done"}
	e.u64(m.Job)
	e.u64(m.Bytes)
	return e.b, e.err
}

func (m *Done) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Done"}
	m.Job = d.u64("Job")
	m.Bytes = d.u64("Bytes")
	return d.finish()
}

func (m *Error) appendBody(b []byte, lim Limits) ([]byte, error) {
	e := encoder{b: b, lim: lim, msg: "Error"}
	e.u64(m.Job)
	e.u8(uint8(m.Code))
	e.str("Msg", m.Msg)
	return e.b, e.err
}

func (m *Error) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Error"}
	m.Job = d.u64("Job")
	m.Code = ErrorCode(d.u8("Code"))
	m.Msg = d.str("Msg")
	return d.finish()
}

// summaryEntry is the wire size of one Summary word: its index and value.
const summaryEntry = 4 + 8

func (m *Summary) appendBody(b []byte, lim Limits) ([]byte, error) {
	if len(m.Values) != len(m.Words) {
		return b, malformed("Summary.Values", "length differs from Words")
	}
	for i, w := range m.Words {
		if w >= m.Size || (i > 0 && w <= m.Words[i-1]) {
			return b, malformed("Summary.Words", "not strictly increasing below Size")
		}
	}
	e := encoder{b: b, lim: lim, msg: "Summary"}
	e.u8(m.Format)
	e.boolean(m.Reset)
	e.boolean(m.Last)
	e.u64(m.Epoch)
	e.u64(m.Seq)
	e.u32(m.Size)
	if e.length("Words", len(m.Words), lim.MaxKeys) {
		for i, w := range m.Words {
			e.u32(w)
			e.u64(m.Values[i])
		}
	}
	return e.b, e.err
}

func (m *Summary) decodeBody(b []byte, lim Limits) error {
	d := decoder{b: b, lim: lim, msg: "Summary"}
	m.Format = d.u8("Format")
	m.Reset = d.boolean("Reset")
	m.Last = d.boolean("Last")
	m.Epoch = d.u64("Epoch")
	m.Seq = d.u64("Seq")
	m.Size = d.u32("Size")
	n := d.length("Words", lim.MaxKeys)
	p := d.take("Words", n*summaryEntry)
	m.Words, m.Values = nil, nil
	if d.err == nil && n > 0 {
		m.Words = make([]uint32, n)
		m.Values = make([]uint64, n)
		for i := range m.Words {
			q := p[i*summaryEntry:]
			m.Words[i] = binary.BigEndian.Uint32(q)
			m.Values[i] = binary.BigEndian.Uint64(q[4:])
			if m.Words[i] >= m.Size || (i > 0 && m.Words[i] <= m.Words[i-1]) {
				d.err = malformed("Summary.Words", "not strictly increasing below Size")
				m.Words, m.Values = nil, nil
				break
			}
		}
	}
	return d.finish()
}
