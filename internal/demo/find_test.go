package demo

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunFind: with no source named anywhere, the nodes load shared
// prefixes from peers their summaries found; what they load is never more
// than what the oracle would have (it knows every store), every block is
// verified, and nothing falls back on loopback. The share found is logged,
// not asserted: on a busy machine a summary may come later than the next
// request for its prefix.
func TestRunFind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunFind(ctx, FindOptions{Nodes: 3, Requests: 30, Gap: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.Print(&b)
	t.Logf("\n%s", b.String())
	if r.Found == 0 || r.Found > r.Oracle || r.Verified != r.Found || r.Fallbacks != 0 {
		t.Fatalf("%+v", r)
	}
}
