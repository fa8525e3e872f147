package engineapi

import (
	"bytes"
	"testing"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// stepDecoderSeeds are frames the decoder must read as proto.Unmarshal
// does: the common step, and the odd encodings protobuf accepts.
func stepDecoderSeeds(t testing.TB) [][]byte {
	keys := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 4)
	good, err := proto.Marshal(&pb.StepRequest{
		Registration: 7,
		NewRequests:  []*pb.NewRequest{{ReqId: "n"}},
		Lookups: []*pb.LookupBatch{
			{ReqId: "a", KeysPacked: keys, PackedVerdicts: true},
			{ReqId: "b", Keys: [][]byte{keys[:16]}},
			{ReqId: "c", KeysPacked: keys[16:32]},
		},
		Loads:    []*pb.Job{{JobId: 1, ReqId: "a", KeysPacked: keys[:16], ChunkIds: []uint32{3}}},
		Finished: []string{"f"},
		EndStep:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch := func(fields ...[]byte) []byte {
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, fieldStepLookups, protowire.BytesType), b)
	}
	bytesField := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	reqID := bytesField(1, []byte("r"))
	return [][]byte{
		good,
		nil,
		// keys_packed twice in one batch: the last one counts.
		batch(reqID, bytesField(fieldLookupKeysPacked, keys), bytesField(fieldLookupKeysPacked, keys[:16])),
		// ... and an empty last one empties it.
		batch(bytesField(fieldLookupKeysPacked, keys), bytesField(fieldLookupKeysPacked, nil)),
		// keys_packed as a varint: an unknown field to protobuf.
		batch(reqID, protowire.AppendVarint(protowire.AppendTag(nil, fieldLookupKeysPacked, protowire.VarintType), 5)),
		// An unknown field in a batch, and a batch with nothing in it.
		batch(bytesField(99, []byte("x")), bytesField(fieldLookupKeysPacked, keys)),
		batch(),
		// lookups as a varint at the top level.
		protowire.AppendVarint(protowire.AppendTag(nil, fieldStepLookups, protowire.VarintType), 1),
		// Malformed inside a batch, and a truncated frame.
		batch([]byte{0x1a, 0x20, 1}),
		good[:len(good)-3],
		// A req_id that is not UTF-8: proto.Unmarshal's error.
		batch(bytesField(1, []byte{0xff}), bytesField(fieldLookupKeysPacked, keys)),
	}
}

// checkSameAsProto decodes frame with a reused decoder and with
// proto.Unmarshal, and fails unless both agree.
func checkSameAsProto(t *testing.T, d *stepDecoder, frame []byte) {
	t.Helper()
	got, gotErr := d.decode(frame)
	want := new(pb.StepRequest)
	wantErr := proto.Unmarshal(frame, want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("frame %x: decoder error %v, proto.Unmarshal %v", frame, gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	if !proto.Equal(got, want) {
		t.Fatalf("frame %x:\ndecoder        %v\nproto.Unmarshal %v", frame, got, want)
	}
	for i, b := range got.Lookups {
		if (b.KeysPacked == nil) != (want.Lookups[i].KeysPacked == nil) {
			t.Fatalf("frame %x: lookups[%d].keys_packed nil %v, proto.Unmarshal's %v", frame, i, b.KeysPacked == nil, want.Lookups[i].KeysPacked == nil)
		}
	}
}

func TestStepDecoderIsProtoUnmarshal(t *testing.T) {
	var d stepDecoder // one decoder for all: its buffers are reused
	for _, frame := range stepDecoderSeeds(t) {
		checkSameAsProto(t, &d, frame)
	}
}

// The point of the decoder: a lookup batch's keys are the frame's bytes.
func TestStepDecoderReadsKeysInPlace(t *testing.T) {
	frame := stepDecoderSeeds(t)[0]
	var d stepDecoder
	req, err := d.decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	k := req.Lookups[0].KeysPacked
	k[0] ^= 0xff
	defer func() { k[0] ^= 0xff }()
	if !bytes.Contains(frame, k) {
		t.Fatal("lookups[0].keys_packed is a copy, not the frame's bytes")
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = d.decode(frame) })
	// The StepRequest, its messages and strings; not one per key, and no
	// copy of keys_packed (which would add one).
	want := new(pb.StepRequest)
	base := testing.AllocsPerRun(100, func() { _ = proto.Unmarshal(frame, want) })
	if allocs >= base {
		t.Fatalf("decoder %v allocations per frame, proto.Unmarshal %v: keys_packed still copied", allocs, base)
	}
}

// FuzzStepDecoder: for any bytes, the step socket's decoder answers what
// proto.Unmarshal answers (values and errors), with one decoder reused.
func FuzzStepDecoder(f *testing.F) {
	for _, s := range stepDecoderSeeds(f) {
		f.Add(s)
	}
	var d stepDecoder
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkSameAsProto(t, &d, frame)
	})
}
