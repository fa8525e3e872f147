package engineapi

import (
	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Field numbers of engine.proto that stepDecoder reads itself.
const (
	fieldStepLookups      = 3 // StepRequest.lookups
	fieldLookupKeysPacked = 3 // LookupBatch.keys_packed
)

// maxDecodedBatches keeps d.packed small whatever a frame holds: a frame
// with more lookup batches goes to proto.Unmarshal, and CheckStep refuses
// it (DefaultLimits' MaxItemsPerStep is this).
const maxDecodedBatches = 1 << 14

// stepDecoder decodes the step socket's request frames so that a lookup
// batch's keys_packed is read in place, not copied. protobuf-go has no
// aliasing unmarshal: it copied every batch's keys (16 KB at 1024 keys)
// into a new slice per step, most of what a step allocated and so most of
// the sidecar's GC. The decoder copies the frame without those fields into
// a buffer it reuses, unmarshals that, and points each batch's KeysPacked
// into the frame. Anything it does not parse itself goes through
// proto.Unmarshal unchanged, so the result is proto.Unmarshal's
// (FuzzStepDecoder checks that).
//
// One per connection: its buffers are reused from frame to frame.
type stepDecoder struct {
	scratch []byte   // the frame without lookups' keys_packed
	packed  [][]byte // each lookup batch's keys_packed, in order (nil: none)
}

// decode unmarshals frame into a new StepRequest. Its lookup batches'
// KeysPacked alias frame: the request is valid only while frame is
// unchanged (the step socket reuses its frame buffer after answering).
func (d *stepDecoder) decode(frame []byte) (*pb.StepRequest, error) {
	req := new(pb.StepRequest)
	if !d.strip(frame) {
		return req, proto.Unmarshal(frame, req)
	}
	if err := proto.Unmarshal(d.scratch, req); err != nil || len(req.Lookups) != len(d.packed) {
		// The error (or, never expected, a miscount) as the frame itself
		// gives it.
		req = new(pb.StepRequest)
		return req, proto.Unmarshal(frame, req)
	}
	for i, b := range req.Lookups {
		b.KeysPacked = d.packed[i]
	}
	return req, nil
}

// strip fills d.scratch with frame minus every lookup batch's keys_packed
// and d.packed with those fields' values. It reports false on anything it
// does not parse: the caller then leaves the frame to proto.Unmarshal.
func (d *stepDecoder) strip(frame []byte) bool {
	d.scratch, d.packed = d.scratch[:0], d.packed[:0]
	for b := frame; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		if num == fieldStepLookups && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			if len(d.packed) >= maxDecodedBatches {
				return false
			}
			d.scratch = append(d.scratch, b[:n]...)
			if !d.appendBatch(v) {
				return false
			}
		} else {
			d.scratch = append(d.scratch, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return true
}

// appendBatch appends one LookupBatch's encoding (length first) without its
// keys_packed fields and records the last of them: a field sent twice is
// the last one's value, as protobuf decodes it.
// It reports false if v's fields do not parse.
func (d *stepDecoder) appendBatch(v []byte) bool {
	var keys []byte
	size := 0
	for b := v; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := 0
		if n >= 0 {
			m = protowire.ConsumeFieldValue(num, typ, b[n:])
		}
		if n < 0 || m < 0 {
			return false
		}
		if num == fieldLookupKeysPacked && typ == protowire.BytesType {
			keys, _ = protowire.ConsumeBytes(b[n:])
		} else {
			size += n + m
		}
		b = b[n+m:]
	}
	d.scratch = protowire.AppendVarint(d.scratch, uint64(size))
	for b := v; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if num != fieldLookupKeysPacked || typ != protowire.BytesType {
			d.scratch = append(d.scratch, b[:n+m]...)
		}
		b = b[n+m:]
	}
	if len(keys) == 0 {
		keys = nil // as proto.Unmarshal leaves an empty bytes field
	}
	d.packed = append(d.packed, keys)
	return true
}
