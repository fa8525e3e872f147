package datapath

import (
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

// TestFrozenDeadline: a read deadline is trusted when the reader learns of
// it on time, and not when it learns of it frozenSlack or more late (its
// process could not run at the deadline: issue 24); other errors are never
// a freeze, nor is a deadline that was not set.
func TestFrozenDeadline(t *testing.T) {
	d := time.Unix(1000, 0)
	wrapped := fmt.Errorf("wire: reading frame header: %w", os.ErrDeadlineExceeded)
	for _, tc := range []struct {
		err      error
		deadline time.Time
		now      time.Time
		want     bool
	}{
		{wrapped, d, d.Add(3 * time.Millisecond), false},
		{wrapped, d, d.Add(frozenSlack - time.Nanosecond), false},
		{wrapped, d, d.Add(frozenSlack), true},
		{wrapped, d, d.Add(3 * time.Second), true}, // SIGSTOP for seconds
		{io.ErrUnexpectedEOF, d, d.Add(3 * time.Second), false},
		{wrapped, time.Time{}, d.Add(3 * time.Second), false},
	} {
		if got := frozen(tc.err, tc.deadline, tc.now); got != tc.want {
			t.Errorf("frozen(%v, learned %v after the deadline) = %v, want %v", tc.err, tc.now.Sub(tc.deadline), got, tc.want)
		}
	}
}
