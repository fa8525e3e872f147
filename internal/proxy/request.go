package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// request is a client's completion or chat request, its fields kept as the
// client sent them so that a leg changes only what it must.
type request struct {
	fields map[string]json.RawMessage
	stream bool
	// prompt is the prefix to locate; ok false for a batch of prompts or
	// anything the proxy cannot key.
	prompt   Prompt
	promptOK bool
	// ownParams: the client sent kv_transfer_params of its own.
	ownParams bool
}

// errBadRequest marks an error that is the client's: a 400.
var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errBadRequest}, args...)...)
}

// parseRequest decodes a /v1/completions (chat false) or
// /v1/chat/completions body. It checks only what the proxy relies on; the
// engine checks the rest.
func parseRequest(body []byte, chat bool) (*request, error) {
	r := &request{}
	if err := json.Unmarshal(body, &r.fields); err != nil || r.fields == nil {
		return nil, badRequest("the body must be a JSON object")
	}
	if raw, ok := r.fields["stream"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &r.stream); err != nil {
			return nil, badRequest("stream must be a boolean")
		}
	}
	if raw, ok := r.fields["kv_transfer_params"]; ok && !isNull(raw) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, badRequest("kv_transfer_params must be an object")
		}
		r.ownParams = true
	}
	if raw, ok := r.fields["model"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &r.prompt.Model); err != nil {
			return nil, badRequest("model must be a string")
		}
	}
	if chat {
		raw, ok := r.fields["messages"]
		var msgs []json.RawMessage
		if !ok || json.Unmarshal(raw, &msgs) != nil || len(msgs) == 0 {
			return nil, badRequest("messages must be a non-empty array")
		}
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil {
			r.prompt.Text, r.promptOK = b.String(), true
		}
		return r, nil
	}
	raw, ok := r.fields["prompt"]
	if !ok || isNull(raw) {
		return nil, badRequest("prompt is required")
	}
	var s string
	var toks []int64
	var texts []string
	var lists [][]int64
	switch {
	case json.Unmarshal(raw, &s) == nil:
		r.prompt.Text, r.promptOK = s, true
	case json.Unmarshal(raw, &toks) == nil:
		r.prompt.Tokens, r.promptOK = toks, true
		if toks == nil {
			r.prompt.Tokens = []int64{}
		}
	case json.Unmarshal(raw, &texts) == nil, json.Unmarshal(raw, &lists) == nil:
		// A batch (strings or token lists): passed through, not keyed.
	default:
		return nil, badRequest("prompt must be a string, an array of token ids, or a batch of them")
	}
	return r, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// body returns the request's JSON with set's fields replaced or added and
// drop's removed.
func (r *request) body(set map[string]any, drop ...string) ([]byte, error) {
	out := make(map[string]any, len(r.fields)+len(set))
	for k, v := range r.fields {
		out[k] = v
	}
	for _, k := range drop {
		delete(out, k)
	}
	for k, v := range set {
		out[k] = v
	}
	return json.Marshal(out)
}

// sourceParams is the role naming engine e as a request's source: key is
// remote_kv_source (symmetric) or remote_prefiller (PD decode side), with
// the fields python/kvp2p/roles.py reads.
func sourceParams(key string, e Engine, kvID string) (map[string]any, error) {
	host, port, err := splitPeer(e.Peer)
	if err != nil {
		return nil, err
	}
	role := map[string]any{"remote_host": host, "remote_port": port, "kv_request_id": kvID}
	if e.Domain != "" {
		role["remote_domain"] = e.Domain
	}
	return map[string]any{key: role}, nil
}
