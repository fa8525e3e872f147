package engineapi

import (
	"fmt"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// KeyBytes is the length of a block key on the API (wire.Key).
const KeyBytes = 16

// Limits bound one Step.
type Limits struct {
	MaxKeysPerStep  int // keys across lookups, loads and stores
	MaxItemsPerStep int // requests, lookup batches, jobs and finished ids
	MaxIDBytes      int // a request id's length
}

// DefaultLimits are generous for one scheduler step of a large engine and
// small enough that one Step cannot make the sidecar allocate much.
func DefaultLimits() Limits {
	return Limits{MaxKeysPerStep: 1 << 16, MaxItemsPerStep: 1 << 14, MaxIDBytes: 512}
}

// CheckStep checks a Step's shape; it knows nothing of the node's state.
func CheckStep(req *pb.StepRequest, lim Limits) error {
	items := len(req.NewRequests) + len(req.Lookups) + len(req.Loads) + len(req.Stores) + len(req.Finished) + len(req.Preempted)
	if items > lim.MaxItemsPerStep {
		return status.Errorf(codes.ResourceExhausted, "step has %d items, at most %d", items, lim.MaxItemsPerStep)
	}
	keys := 0
	for _, b := range req.Lookups {
		keys += len(b.Keys) + len(b.KeysPacked)/KeyBytes
	}
	for _, j := range append(req.Loads, req.Stores...) {
		keys += len(j.Keys) + len(j.KeysPacked)/KeyBytes
	}
	if st := req.Stored; st != nil {
		keys += len(st.ChunkIds) + len(st.RemovedChunks)
		if len(st.KeysPacked) != KeyBytes*len(st.ChunkIds) {
			return status.Errorf(codes.InvalidArgument, "stored: %d bytes of keys for %d chunks, want %d bytes each", len(st.KeysPacked), len(st.ChunkIds), KeyBytes)
		}
	}
	if keys > lim.MaxKeysPerStep {
		return status.Errorf(codes.ResourceExhausted, "step has %d keys, at most %d", keys, lim.MaxKeysPerStep)
	}
	if err := unpackStep(req); err != nil {
		return err
	}
	if req.Registration == 0 {
		return status.Error(codes.InvalidArgument, "registration is required")
	}
	for i, r := range req.NewRequests {
		if err := checkID(r.ReqId, lim); err != nil {
			return status.Errorf(codes.InvalidArgument, "new_requests[%d]: %v", i, err)
		}
		if err := checkParams(r.Params, lim); err != nil {
			return status.Errorf(codes.InvalidArgument, "new_requests[%d] (%s): %v", i, r.ReqId, err)
		}
	}
	for i, b := range req.Lookups {
		if err := checkID(b.ReqId, lim); err != nil {
			return status.Errorf(codes.InvalidArgument, "lookups[%d]: %v", i, err)
		}
		if err := checkKeys(b.Keys); err != nil {
			return status.Errorf(codes.InvalidArgument, "lookups[%d] (%s): %v", i, b.ReqId, err)
		}
	}
	jobIDs := make(map[uint64]struct{}, len(req.Loads)+len(req.Stores))
	loadChunks := make(map[uint32]struct{})
	for _, g := range []struct {
		what string
		jobs []*pb.Job
	}{{"loads", req.Loads}, {"stores", req.Stores}} {
		what, jobs := g.what, g.jobs
		for i, j := range jobs {
			if err := checkJob(j, lim); err != nil {
				return status.Errorf(codes.InvalidArgument, "%s[%d]: %v", what, i, err)
			}
			if _, dup := jobIDs[j.JobId]; dup {
				return status.Errorf(codes.InvalidArgument, "%s[%d]: job_id %d twice in one step", what, i, j.JobId)
			}
			jobIDs[j.JobId] = struct{}{}
			if what != "loads" {
				continue
			}
			for _, c := range j.ChunkIds {
				if _, dup := loadChunks[c]; dup {
					return status.Errorf(codes.InvalidArgument, "loads[%d]: chunk %d given to two loads", i, c)
				}
				loadChunks[c] = struct{}{}
			}
		}
	}
	for i, j := range req.Stores {
		for _, c := range j.ChunkIds {
			if _, clash := loadChunks[c]; clash {
				return status.Errorf(codes.InvalidArgument, "stores[%d]: chunk %d is also given to a load", i, c)
			}
		}
	}
	for i, id := range req.Finished {
		if err := checkID(id, lim); err != nil {
			return status.Errorf(codes.InvalidArgument, "finished[%d]: %v", i, err)
		}
	}
	for i, id := range req.Preempted {
		if err := checkID(id, lim); err != nil {
			return status.Errorf(codes.InvalidArgument, "preempted[%d]: %v", i, err)
		}
	}
	return nil
}

func checkID(id string, lim Limits) error {
	if id == "" {
		return fmt.Errorf("empty request id")
	}
	if len(id) > lim.MaxIDBytes {
		return fmt.Errorf("request id of %d bytes, at most %d", len(id), lim.MaxIDBytes)
	}
	return nil
}

// unpackStep turns every job's keys_packed into keys (slices of the
// packed bytes: one allocation per job, not per key), so that the rest of
// the sidecar sees one form of a job. A lookup batch's keys_packed is only
// checked and stays packed: the step reads its keys one after the other
// (LookupKeys), and a slice per key made a 1024-key step's largest
// allocation.
func unpackStep(req *pb.StepRequest) error {
	for i, b := range req.Lookups {
		if _, err := unpackLen(b.Keys, b.KeysPacked); err != nil {
			return status.Errorf(codes.InvalidArgument, "lookups[%d]: %v", i, err)
		}
	}
	for _, g := range []struct {
		what string
		jobs []*pb.Job
	}{{"loads", req.Loads}, {"stores", req.Stores}} {
		for i, j := range g.jobs {
			keys, err := unpack(j.Keys, j.KeysPacked)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "%s[%d]: %v", g.what, i, err)
			}
			j.Keys, j.KeysPacked = keys, nil
		}
	}
	return nil
}

// LookupKeys calls f with each of a checked batch's keys in order, from
// keys or from keys_packed, whichever it came with.
func LookupKeys(b *pb.LookupBatch, f func(key []byte)) {
	for _, k := range b.Keys {
		f(k)
	}
	for p := b.KeysPacked; len(p) >= KeyBytes; p = p[KeyBytes:] {
		f(p[:KeyBytes:KeyBytes])
	}
}

// unpackLen checks that keys and packed are not both set and that packed
// holds whole keys; it returns how many keys packed holds.
func unpackLen(keys [][]byte, packed []byte) (int, error) {
	if len(packed) == 0 {
		return 0, nil
	}
	if len(keys) > 0 {
		return 0, fmt.Errorf("both keys and keys_packed set")
	}
	if len(packed)%KeyBytes != 0 {
		return 0, fmt.Errorf("keys_packed of %d bytes: not a multiple of %d", len(packed), KeyBytes)
	}
	return len(packed) / KeyBytes, nil
}

func unpack(keys [][]byte, packed []byte) ([][]byte, error) {
	n, err := unpackLen(keys, packed)
	if err != nil || n == 0 {
		return keys, err
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = packed[i*KeyBytes : (i+1)*KeyBytes : (i+1)*KeyBytes]
	}
	return out, nil
}

func checkKeys(keys [][]byte) error {
	for i, k := range keys {
		if len(k) != KeyBytes {
			return fmt.Errorf("key %d is %d bytes, want %d", i, len(k), KeyBytes)
		}
	}
	return nil
}

func checkJob(j *pb.Job, lim Limits) error {
	if j.JobId == 0 {
		return fmt.Errorf("job_id 0 is reserved")
	}
	if err := checkID(j.ReqId, lim); err != nil {
		return err
	}
	if len(j.Keys) == 0 || len(j.Keys) != len(j.ChunkIds) {
		return fmt.Errorf("job %d: %d keys and %d chunk ids (want the same number, at least one)", j.JobId, len(j.Keys), len(j.ChunkIds))
	}
	seen := make(map[uint32]struct{}, len(j.ChunkIds))
	for _, c := range j.ChunkIds {
		if _, dup := seen[c]; dup {
			return fmt.Errorf("job %d: chunk %d twice", j.JobId, c)
		}
		seen[c] = struct{}{}
	}
	return checkKeys(j.Keys)
}

func checkParams(p *pb.TransferParams, lim Limits) error {
	if p == nil {
		return nil
	}
	for i, r := range []*pb.Remote{p.RemotePrefiller, p.RemoteDecoder, p.RemoteKvSource} {
		name := [...]string{"remote_prefiller", "remote_decoder", "remote_kv_source"}[i]
		if r == nil {
			continue
		}
		if i == 1 && r.Host == "" && r.Port == 0 {
			// vLLM's remote_decoder carries only kv_request_id: the id
			// is then the capability (its first fetcher holds it); with
			// host and port it names the only peer that may fetch.
			if len(r.Domain) > lim.MaxIDBytes || len(r.KvRequestId) > lim.MaxIDBytes {
				return fmt.Errorf("%s: domain or kv_request_id too long", name)
			}
			continue
		}
		if r.Host == "" || len(r.Host) > 255 {
			return fmt.Errorf("%s: host %q", name, r.Host)
		}
		if r.Port == 0 || r.Port > 65535 {
			return fmt.Errorf("%s: port %d, want 1-65535", name, r.Port)
		}
		if len(r.Domain) > lim.MaxIDBytes || len(r.KvRequestId) > lim.MaxIDBytes {
			return fmt.Errorf("%s: domain or kv_request_id too long", name)
		}
	}
	if len(p.KvRequestId) > lim.MaxIDBytes {
		return fmt.Errorf("kv_request_id of %d bytes", len(p.KvRequestId))
	}
	return nil
}

// CheckRegister checks a Register's shape.
func CheckRegister(r *pb.Register) error {
	switch {
	case r.ApiVersion != pb.ApiVersion_API_VERSION_1:
		return status.Errorf(codes.FailedPrecondition, "api_version %d: this sidecar speaks %d", r.ApiVersion, pb.ApiVersion_API_VERSION_1)
	case r.RegionPath == "":
		return status.Error(codes.InvalidArgument, "region_path is required")
	case r.NumChunks == 0 || r.RowStride == 0:
		return status.Errorf(codes.InvalidArgument, "region of %d chunks of %d bytes", r.NumChunks, r.RowStride)
	case len(r.EngineId) > 512 || len(r.Fingerprint) > 4096 || len(r.HashSeed) > 4096:
		return status.Error(codes.InvalidArgument, "engine_id, fingerprint or hash_seed too long")
	}
	return nil
}
