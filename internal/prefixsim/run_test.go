package prefixsim

import (
	"testing"
)

func small() Config {
	return Config{Seed: 3, Pods: 20, ChunksPerRank: 2048, Requests: 8_000, Docs: 1000}
}

// TestSmallFleet: a small fleet finds most of what the oracle finds, the
// same run twice gives the same result, and the figures are sane.
func TestSmallFleet(t *testing.T) {
	a, err := Run(small())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v ratio %.3f", a, a.Ratio())
	if a.OracleTokens == 0 || a.FoundTokens > a.OracleTokens {
		t.Fatalf("oracle %d found %d", a.OracleTokens, a.FoundTokens)
	}
	if a.Ratio() < 0.8 {
		t.Fatalf("found %.3f of the oracle's tokens", a.Ratio())
	}
	b, _ := Run(small())
	if a != b {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}
