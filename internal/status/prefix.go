package status

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// PathPrefix is a router's question: which nodes can serve how much of a
// prefix (docs/find.md).
const PathPrefix = "/v1/prefix"

// MaxPrefixKeys bounds the keys one question names.
const MaxPrefixKeys = 8192

// PrefixNode is one node's answer: it probably holds Blocks keys of the
// prefix, in its servable tier (the engine's CPU tier, which its sidecar
// can send from; blocks only on a GPU are never counted).
type PrefixNode struct {
	Peer     string `json:"peer"`
	Blocks   int    `json:"blocks"`
	Servable bool   `json:"servable"`
}

// PrefixAnswer is the JSON body of GET /v1/prefix.
type PrefixAnswer struct {
	Keys  int          `json:"keys"`
	Nodes []PrefixNode `json:"nodes"`
}

// PrefixFunc answers for keys: this node first when it holds any, then its
// peers by what their summaries say, longest first.
type PrefixFunc func(keys []wire.Key) ([]PrefixNode, error)

// PrefixHandler serves GET /v1/prefix?keys=K1,K2,...: the block keys of a
// prompt in order, each 32 hex digits (the 16-byte keys the engine API
// carries), comma-separated.
func PrefixHandler(f PrefixFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys, err := parseKeys(r.URL.Query().Get("keys"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		nodes, err := f(keys)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if nodes == nil {
			nodes = []PrefixNode{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(PrefixAnswer{Keys: len(keys), Nodes: nodes})
	})
}

func parseKeys(s string) ([]wire.Key, error) {
	if s == "" {
		return nil, fmt.Errorf("keys: none given (keys=K1,K2,..., 32 hex digits each)")
	}
	if n := strings.Count(s, ",") + 1; n > MaxPrefixKeys {
		return nil, fmt.Errorf("keys: %d, at most %d", n, MaxPrefixKeys)
	}
	var out []wire.Key
	for i, h := range strings.Split(s, ",") {
		var k wire.Key
		if len(h) != 2*wire.KeySize {
			return nil, fmt.Errorf("keys: key %d is %d hex digits, want %d", i, len(h), 2*wire.KeySize)
		}
		if _, err := hex.Decode(k[:], []byte(h)); err != nil {
			return nil, fmt.Errorf("keys: key %d: %v", i, err)
		}
		out = append(out, k)
	}
	return out, nil
}
