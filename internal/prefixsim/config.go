package prefixsim

import (
	"fmt"
	"time"
)

// Config is one run. Zero fields take Default's values.
type Config struct {
	Seed  uint64
	Pods  int // behind one round-robin balancer
	Ranks int // per pod: reported, not simulated (see the package doc)
	// ChunksPerRank is a rank's CPU tier in blocks.
	ChunksPerRank int
	BlockTokens   int
	// Requests is the number of requests; the first WarmupFraction of
	// them fill the caches and are not counted.
	Requests       int
	WarmupFraction float64
	// RatePerPod is each pod's requests per second (virtual time).
	RatePerPod float64
	// Docs documents, DocTokensMin..Max tokens each, drawn by Zipf(ZipfS).
	Docs                       int
	DocTokensMin, DocTokensMax int
	ZipfS                      float64
	// FollowUp is the chance that a request continues a live session
	// (of at most LiveSessions, MaxTurns turns each) rather than opening
	// a new one.
	FollowUp                             float64
	LiveSessions, MaxTurns               int
	QuestionTokensMin, QuestionTokensMax int
	AnswerTokensMin, AnswerTokensMax     int
	// Interval is how often a producer flushes its delta; MaxAge is how
	// old a summary Find still uses.
	Interval, MaxAge time.Duration
	// NICBitsPerSecond is the NIC the traffic is compared with.
	NICBitsPerSecond float64
}

// Default is the run docs/evaluation.md reports: 1,000 pods × 8 ranks.
func Default() Config {
	return Config{
		Seed: 1, Pods: 1000, Ranks: 8, ChunksPerRank: 8192, BlockTokens: 16,
		Requests: 200_000, WarmupFraction: 0.25, RatePerPod: 2,
		Docs: 20_000, DocTokensMin: 1024, DocTokensMax: 8192, ZipfS: 1.1,
		FollowUp: 0.5, LiveSessions: 20_000, MaxTurns: 8,
		QuestionTokensMin: 32, QuestionTokensMax: 256, AnswerTokensMin: 64, AnswerTokensMax: 512,
		Interval: time.Second, MaxAge: 3 * time.Second,
		NICBitsPerSecond: 25e9,
	}
}

func (c *Config) fill() error {
	d := Default()
	set := func(v *int, dv int) {
		if *v == 0 {
			*v = dv
		}
	}
	set(&c.Pods, d.Pods)
	set(&c.Ranks, d.Ranks)
	set(&c.ChunksPerRank, d.ChunksPerRank)
	set(&c.BlockTokens, d.BlockTokens)
	set(&c.Requests, d.Requests)
	set(&c.Docs, d.Docs)
	set(&c.DocTokensMin, d.DocTokensMin)
	set(&c.DocTokensMax, d.DocTokensMax)
	set(&c.LiveSessions, d.LiveSessions)
	set(&c.MaxTurns, d.MaxTurns)
	set(&c.QuestionTokensMin, d.QuestionTokensMin)
	set(&c.QuestionTokensMax, d.QuestionTokensMax)
	set(&c.AnswerTokensMin, d.AnswerTokensMin)
	set(&c.AnswerTokensMax, d.AnswerTokensMax)
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.WarmupFraction == 0 {
		c.WarmupFraction = d.WarmupFraction
	}
	if c.RatePerPod == 0 {
		c.RatePerPod = d.RatePerPod
	}
	if c.ZipfS == 0 {
		c.ZipfS = d.ZipfS
	}
	if c.FollowUp == 0 {
		c.FollowUp = d.FollowUp
	}
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.MaxAge == 0 {
		c.MaxAge = d.MaxAge
	}
	if c.NICBitsPerSecond == 0 {
		c.NICBitsPerSecond = d.NICBitsPerSecond
	}
	switch {
	case c.Pods < 2:
		return fmt.Errorf("prefixsim: %d pods, want at least 2", c.Pods)
	case c.ZipfS <= 1:
		return fmt.Errorf("prefixsim: Zipf exponent %v, want over 1", c.ZipfS)
	case c.Docs < 2 || c.DocTokensMin > c.DocTokensMax || c.QuestionTokensMin > c.QuestionTokensMax || c.AnswerTokensMin > c.AnswerTokensMax:
		return fmt.Errorf("prefixsim: bad workload sizes")
	case c.WarmupFraction < 0 || c.WarmupFraction >= 1 || c.FollowUp < 0 || c.FollowUp >= 1:
		return fmt.Errorf("prefixsim: fractions must be in [0, 1)")
	}
	return nil
}
