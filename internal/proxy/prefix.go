package proxy

import (
	"container/list"
	"context"
	"sync"
)

// Prompt is what the proxy knows of a request's prefix, before any
// tokenizer: the token ids when the client sent them, otherwise the text (a
// completion's prompt, or a chat's messages as compact JSON, so that a
// conversation's earlier turns are a byte prefix of its later ones).
type Prompt struct {
	Model  string
	Tokens []int64
	Text   string
}

// A Locator says which engine of a symmetric fleet probably holds a
// prompt's prefix, so that the proxy can name it as the request's source.
// It only advises: the named engine's sidecar answers the lookup, and a
// miss prefills locally. Engines are indices into Config.Engines. Both
// methods are called from many goroutines at once.
type Locator interface {
	// Locate returns the engine that probably holds the longest prefix
	// of p, or ok false. It may do I/O (asking a sidecar, say) bounded by
	// ctx, which ends when the client goes away.
	Locate(ctx context.Context, p Prompt) (engine int, ok bool)
	// Served records that engine ran p: it now holds p's prefix.
	Served(p Prompt, engine int)
}

// Prefixes are cut every chunkTokens token ids, or every chunkBytes bytes
// of text (about as many tokens), at most maxChunks per prompt: a prompt's
// prefix is remembered up to 64 Ki tokens.
const (
	chunkTokens = 64
	chunkBytes  = 4 * chunkTokens
	maxChunks   = 1024
)

// prefixKeys returns a hash of each whole chunk prefix of p, shortest
// first: key k covers chunks 0..k. Two prompts share key k exactly when
// (hashes aside) they share their first k+1 chunks. The hash is 64-bit
// FNV-1a over the model's name, then each token's eight bytes (little
// endian) or the text's bytes.
func prefixKeys(p Prompt) []uint64 {
	h := fnvString(fnvOffset, p.Model)
	var keys []uint64
	if p.Tokens != nil {
		h = fnvString(h, "\x00t")
		for i, t := range p.Tokens {
			for k := range 8 {
				h = (h ^ uint64(byte(t>>(8*k)))) * fnvPrime
			}
			if (i+1)%chunkTokens == 0 {
				keys = append(keys, h)
				if len(keys) == maxChunks {
					break
				}
			}
		}
		return keys
	}
	h = fnvString(h, "\x00s")
	for off := 0; off+chunkBytes <= len(p.Text) && len(keys) < maxChunks; off += chunkBytes {
		h = fnvString(h, p.Text[off:off+chunkBytes])
		keys = append(keys, h)
	}
	return keys
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// Memory is a Locator that remembers, for the prefixes of the prompts it
// routed, the engine that ran each last: bounded to a number of prefix
// entries (one per chunk of a prompt), least recently used evicted first.
// A prefix shorter than one chunk is never named.
type Memory struct {
	mu      sync.Mutex
	max     int
	entries map[uint64]*list.Element
	lru     list.List // of *memEntry, most recent at the front
}

type memEntry struct {
	key    uint64
	engine int
}

// NewMemory returns a Memory holding at most entries prefix entries; it
// uses about 100 bytes per entry.
func NewMemory(entries int) *Memory {
	return &Memory{max: max(entries, 1), entries: map[uint64]*list.Element{}}
}

// Locate returns the engine that last ran the longest remembered prefix
// of p.
func (m *Memory) Locate(_ context.Context, p Prompt) (int, bool) {
	keys := prefixKeys(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(keys) - 1; i >= 0; i-- {
		if el, ok := m.entries[keys[i]]; ok {
			m.lru.MoveToFront(el)
			return el.Value.(*memEntry).engine, true
		}
	}
	return 0, false
}

// Served records engine as the holder of every prefix of p.
func (m *Memory) Served(p Prompt, engine int) {
	keys := prefixKeys(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if el, ok := m.entries[k]; ok {
			el.Value.(*memEntry).engine = engine
			m.lru.MoveToFront(el)
			continue
		}
		m.entries[k] = m.lru.PushFront(&memEntry{key: k, engine: engine})
	}
	for len(m.entries) > m.max {
		el := m.lru.Back()
		m.lru.Remove(el)
		delete(m.entries, el.Value.(*memEntry).key)
	}
}

// Len is the number of prefix entries remembered.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}
