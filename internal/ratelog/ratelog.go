package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults: at most Burst records of one message per Window.
const (
	DefaultBurst  = 10
	DefaultWindow = 10 * time.Second
	// maxKeys bounds the per-message state: messages built with Sprintf
	// are not a finite set.
	maxKeys = 1024
)

type state struct {
	start      time.Time
	n          int // records in the window, passed or not
	suppressed int // dropped since the last one that passed
}

// limiter is shared by a handler and every handler derived from it
// (WithAttrs, WithGroup), so that a message's budget is per node.
type limiter struct {
	burst  int
	window time.Duration
	mu     sync.Mutex
	keys   map[string]*state
}

// Handler rate-limits by record message (and level). Time comes from the
// records themselves.
type Handler struct {
	next slog.Handler
	lim  *limiter
}

// New wraps next with burst records per window per message; zero values
// mean the defaults.
func New(next slog.Handler, burst int, window time.Duration) *Handler {
	if burst <= 0 {
		burst = DefaultBurst
	}
	if window <= 0 {
		window = DefaultWindow
	}
	return &Handler{next: next, lim: &limiter{burst: burst, window: window, keys: map[string]*state{}}}
}

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		return h.next.Handle(ctx, r)
	}
	pass, suppressed := h.lim.admit(r.Level.String()+" "+r.Message, r.Time)
	if !pass {
		return nil
	}
	if suppressed > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", suppressed))
	}
	return h.next.Handle(ctx, r)
}

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(as), lim: h.lim}
}

func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), lim: h.lim}
}

// admit reports whether a record of key at t passes, and how many of key
// were dropped since the last one that passed.
func (l *limiter) admit(key string, t time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[key]
	if s == nil {
		if len(l.keys) >= maxKeys {
			clear(l.keys) // a burst of distinct messages: start over
		}
		s = &state{start: t}
		l.keys[key] = s
	}
	if t.Sub(s.start) >= l.window {
		s.start, s.n = t, 0
	}
	s.n++
	if s.n > l.burst {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.suppressed = 0
	return true, n
}
