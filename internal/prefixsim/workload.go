package prefixsim

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/kvp2p/kvp2p/internal/summary"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// session is one conversation about one document.
type session struct {
	id    uint64
	doc   int
	turns []int // tokens of each turn so far (question + answer)
	next  int   // the question's length for the next turn
}

// workload draws requests: documents by Zipf popularity, sessions that
// come back for more turns.
type workload struct {
	cfg      Config
	r        *rand.Rand
	zipf     *rand.Zipf
	docLen   []int
	sessions []*session // live sessions; a follow-up picks one uniformly
	nextID   uint64
}

func newWorkload(cfg Config) *workload {
	r := rand.New(rand.NewPCG(cfg.Seed, 0x9e37))
	w := &workload{cfg: cfg, r: r, zipf: rand.NewZipf(r, cfg.ZipfS, 1, uint64(cfg.Docs-1))}
	w.docLen = make([]int, cfg.Docs)
	for i := range w.docLen {
		w.docLen[i] = cfg.DocTokensMin + r.IntN(cfg.DocTokensMax-cfg.DocTokensMin+1)
	}
	return w
}

// request is one prompt: its session, and how many tokens of the
// session's sequence it covers (prompt) and stores when done (prompt plus
// the answer).
type request struct {
	s      *session
	prompt int
	total  int
}

func (w *workload) next() request {
	var s *session
	if len(w.sessions) > 0 && w.r.Float64() < w.cfg.FollowUp {
		s = w.sessions[w.r.IntN(len(w.sessions))]
	} else {
		w.nextID++
		s = &session{id: w.nextID, doc: int(w.zipf.Uint64())}
		s.next = w.question()
		if len(w.sessions) >= w.cfg.LiveSessions {
			i := w.r.IntN(len(w.sessions))
			w.sessions[i] = w.sessions[len(w.sessions)-1]
			w.sessions = w.sessions[:len(w.sessions)-1]
		}
		w.sessions = append(w.sessions, s)
	}
	prompt := w.docLen[s.doc]
	for _, t := range s.turns {
		prompt += t
	}
	prompt += s.next
	answer := w.cfg.AnswerTokensMin + w.r.IntN(w.cfg.AnswerTokensMax-w.cfg.AnswerTokensMin+1)
	s.turns = append(s.turns, s.next+answer)
	s.next = w.question()
	if len(s.turns) >= w.cfg.MaxTurns {
		w.end(s)
	}
	return request{s: s, prompt: prompt, total: prompt + answer}
}

func (w *workload) question() int {
	return w.cfg.QuestionTokensMin + w.r.IntN(w.cfg.QuestionTokensMax-w.cfg.QuestionTokensMin+1)
}

func (w *workload) end(s *session) {
	for i, x := range w.sessions {
		if x == s {
			w.sessions[i] = w.sessions[len(w.sessions)-1]
			w.sessions = w.sessions[:len(w.sessions)-1]
			return
		}
	}
}

// keys fills ks with the block keys of the first tokens tokens of s's
// sequence: a chain, as vLLM's block hashes are (a block's key depends on
// every token before it), so sessions on one document share the keys of
// the blocks wholly inside the document and differ after.
func (w *workload) keys(s *session, tokens int, ks []uint64) []uint64 {
	ks = ks[:0]
	bt := w.cfg.BlockTokens
	doc := w.docLen[s.doc]
	var k uint64
	for b := 0; (b+1)*bt <= tokens; b++ {
		owner := uint64(s.doc)<<1 | 0
		if (b+1)*bt > doc {
			owner = s.id<<1 | 1
		}
		k = summary.Mix(k ^ summary.Mix(owner+0x51ed27) ^ uint64(b)*0x2545f4914f6cdd1d)
		ks = append(ks, k)
	}
	return ks
}

// wireKey is the 16-byte key a block's summary entry is made from.
func wireKey(k uint64) (out wire.Key) {
	binary.LittleEndian.PutUint64(out[:8], k)
	binary.LittleEndian.PutUint64(out[8:], summary.Mix(k^0x5bd1e995))
	return out
}
