package status

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p/internal/wire"
)

func TestPrefixHandler(t *testing.T) {
	var asked []wire.Key
	h := PrefixHandler(func(keys []wire.Key) ([]PrefixNode, error) {
		asked = keys
		return []PrefixNode{{Peer: "a:1", Blocks: 2, Servable: true}}, nil
	})
	k1, k2 := strings.Repeat("01", 16), strings.Repeat("ab", 16)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", PathPrefix+"?keys="+k1+","+k2, nil))
	var ans PrefixAnswer
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &ans) != nil {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if ans.Keys != 2 || len(ans.Nodes) != 1 || ans.Nodes[0] != (PrefixNode{"a:1", 2, true}) || len(asked) != 2 || asked[1][0] != 0xab {
		t.Fatalf("answer %+v, asked %x", ans, asked)
	}
	for _, bad := range []string{"", "keys=", "keys=0102", "keys=" + strings.Repeat("zz", 16), "keys=" + strings.Repeat(k1+",", MaxPrefixKeys) + k1} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", PathPrefix+"?"+bad, nil))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%.40q: %d, want 400", bad, rec.Code)
		}
	}
}
