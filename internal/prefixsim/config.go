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
	def(&c.Seed, d.Seed)
	for _, f := range []struct {
		v *int
		d int
	}{
		{&c.Pods, d.Pods}, {&c.Ranks, d.Ranks}, {&c.ChunksPerRank, d.ChunksPerRank}, {&c.BlockTokens, d.BlockTokens},
		{&c.Requests, d.Requests}, {&c.Docs, d.Docs}, {&c.DocTokensMin, d.DocTokensMin}, {&c.DocTokensMax, d.DocTokensMax},
		{&c.LiveSessions, d.LiveSessions}, {&c.MaxTurns, d.MaxTurns},
		{&c.QuestionTokensMin, d.QuestionTokensMin}, {&c.QuestionTokensMax, d.QuestionTokensMax},
		{&c.AnswerTokensMin, d.AnswerTokensMin}, {&c.AnswerTokensMax, d.AnswerTokensMax},
	} {
		def(f.v, f.d)
	}
	for _, f := range []struct {
		v *float64
		d float64
	}{
		{&c.WarmupFraction, d.WarmupFraction}, {&c.RatePerPod, d.RatePerPod}, {&c.ZipfS, d.ZipfS},
		{&c.FollowUp, d.FollowUp}, {&c.NICBitsPerSecond, d.NICBitsPerSecond},
	} {
		def(f.v, f.d)
	}
	def(&c.Interval, d.Interval)
	def(&c.MaxAge, d.MaxAge)
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

// def sets *v to d when *v is zero.
func def[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
