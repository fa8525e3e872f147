package proxy

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestPoolPick(t *testing.T) {
	es := make([]Engine, 3)
	p := newPool(es, PickRoundRobin)
	var got []int
	for range 6 {
		got = append(got, p.acquire(2))
	}
	if want := []int{0, 1, 2, 0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("round-robin: %v, want %v whatever is preferred", got, want)
	}

	p = newPool(es, PickLeastLoaded)
	a, b := p.acquire(-1), p.acquire(-1) // 0, then 1: ties go in turn
	if a != 0 || b != 1 {
		t.Fatalf("least-loaded from idle: %d %d, want 0 1", a, b)
	}
	if c := p.acquire(0); c != 2 {
		t.Errorf("preferring busy 0 with 2 idle: got %d, want 2", c)
	}
	p.release(1)
	if c := p.acquire(-1); c != 1 {
		t.Errorf("after 1's release: got %d, want 1, the only idle one", c)
	}
	p.release(0)
	p.release(2)
	if c := p.acquire(2); c != 2 {
		t.Errorf("preferring 2 among idle 0 and 2: got %d", c)
	}
	if l := p.load(); !slices.Equal(l, []int{0, 1, 1}) {
		t.Errorf("load %v", l)
	}
}

func tok(first, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(first + i)
	}
	return out
}

func TestMemoryLongestPrefix(t *testing.T) {
	m := NewMemory(1 << 10)
	ctx := context.Background()
	long := Prompt{Tokens: tok(0, 3*chunkTokens)}
	short := Prompt{Tokens: tok(0, chunkTokens+5)}
	m.Served(long, 1)
	m.Served(short, 2) // now 2 ran the first chunk last
	if e, ok := m.Locate(ctx, Prompt{Tokens: tok(0, 4*chunkTokens)}); !ok || e != 1 {
		t.Errorf("a prompt extending long: %d %v, want 1, the holder of its longest prefix", e, ok)
	}
	if e, ok := m.Locate(ctx, Prompt{Tokens: append(tok(0, chunkTokens), 99)}); !ok || e != 2 {
		t.Errorf("sharing one chunk: %d %v, want 2, its last runner", e, ok)
	}
	for _, p := range []Prompt{
		{Tokens: tok(0, chunkTokens-1)},               // under one chunk
		{Tokens: tok(1, 3*chunkTokens)},               // shifted
		{Model: "other", Tokens: tok(0, chunkTokens)}, // another model
		{Text: strings.Repeat("a", 3*chunkBytes)},     // text keys apart from tokens
	} {
		if e, ok := m.Locate(ctx, p); ok {
			t.Errorf("%.60v: located %d, want none", p, e)
		}
	}
	text := strings.Repeat("doc ", chunkBytes)
	m.Served(Prompt{Text: text + "question one"}, 0)
	if e, ok := m.Locate(ctx, Prompt{Text: text + "question two"}); !ok || e != 0 {
		t.Errorf("text sharing a document: %d %v, want 0", e, ok)
	}
}

func TestMemoryBounded(t *testing.T) {
	m := NewMemory(10)
	for i := range 100 {
		m.Served(Prompt{Tokens: tok(i*1000, 4*chunkTokens)}, i%3)
		if m.Len() > 10 {
			t.Fatalf("after %d prompts: %d entries, bound 10", i+1, m.Len())
		}
	}
	if _, ok := m.Locate(context.Background(), Prompt{Tokens: tok(0, 4*chunkTokens)}); ok {
		t.Error("the oldest prompt is still remembered past the bound")
	}
	if e, ok := m.Locate(context.Background(), Prompt{Tokens: tok(99*1000, 4*chunkTokens)}); !ok || e != 99%3 {
		t.Errorf("the newest prompt: %d %v", e, ok)
	}
	huge := Prompt{Tokens: tok(0, (maxChunks+10)*chunkTokens)}
	if n := len(prefixKeys(huge)); n != maxChunks {
		t.Errorf("a huge prompt has %d keys, bound %d", n, maxChunks)
	}
}

func TestParseChatPrefix(t *testing.T) {
	turn1, err := parseRequest([]byte(`{"messages":[{"role":"system","content":"`+strings.Repeat("s", 300)+`"},{"role":"user","content":"a"}]}`), true)
	if err != nil {
		t.Fatal(err)
	}
	turn2, _ := parseRequest([]byte(`{"messages": [ {"role":"system", "content":"`+strings.Repeat("s", 300)+`"},{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`), true)
	if !strings.HasPrefix(turn2.prompt.Text, strings.TrimSuffix(turn1.prompt.Text, "]")) {
		t.Errorf("a conversation's earlier turn is not a prefix of its later one:\n%s\n%s", turn1.prompt.Text, turn2.prompt.Text)
	}
	k1, k2 := prefixKeys(turn1.prompt), prefixKeys(turn2.prompt)
	if len(k1) == 0 || k1[0] != k2[0] {
		t.Errorf("turns share no key: %v %v", k1, k2)
	}
}

// FuzzParseRequest: any body is refused with an error or parsed; a parsed
// request re-encodes, with a leg's fields, to a JSON object.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"prompt":"x"}`, `{"prompt":[1,2,3],"stream":true}`, `{"prompt":[[1],[2]]}`,
		`{"messages":[{"role":"user","content":"x"}],"kv_transfer_params":{"a":1}}`, `{"prompt":null}`, `[]`, `{"stream":1}`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := parseRequest(body, chat)
		if err != nil {
			return
		}
		prefixKeys(r.prompt)
		out, err := r.body(map[string]any{"max_tokens": 1}, "stream_options")
		if err != nil {
			t.Fatalf("re-encoding %q: %v", body, err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil || string(m["max_tokens"]) != "1" {
			t.Fatalf("re-encoded %q as %q", body, out)
		}
	})
}
