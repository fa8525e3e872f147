package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLimitsRepeatedMessages(t *testing.T) {
	var b strings.Builder
	h := New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}), 3, 10*time.Second)
	log := slog.New(h).With("node", "a")
	t0 := time.Unix(0, 0)
	emit := func(at time.Time, lvl slog.Level, msg string) {
		r := slog.NewRecord(at, lvl, msg, 0)
		if err := log.Handler().Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		emit(t0.Add(time.Duration(i)*time.Millisecond), slog.LevelWarn, "garbage hello")
	}
	emit(t0.Add(time.Second), slog.LevelWarn, "other")
	for range 5 {
		emit(t0.Add(time.Second), slog.LevelDebug, "debug is not limited")
	}
	emit(t0.Add(11*time.Second), slog.LevelWarn, "garbage hello")
	out := b.String()
	if n := strings.Count(out, "garbage hello"); n != 4 {
		t.Fatalf("%d 'garbage hello' lines, want 3 in the window and 1 after:\n%s", n, out)
	}
	if !strings.Contains(out, "suppressed=97") {
		t.Fatalf("the count of dropped lines is missing:\n%s", out)
	}
	if strings.Count(out, "debug is not limited") != 5 || !strings.Contains(out, "other") {
		t.Fatalf("other messages were limited:\n%s", out)
	}
}

func TestKeysBounded(t *testing.T) {
	h := New(slog.NewTextHandler(&strings.Builder{}, nil), 1, time.Second)
	for i := range 5000 {
		r := slog.NewRecord(time.Unix(0, 0), slog.LevelWarn, strings.Repeat("x", i%3000), 0)
		_ = h.Handle(context.Background(), r)
	}
	if n := len(h.lim.keys); n > maxKeys {
		t.Fatalf("%d keys kept", n)
	}
}
