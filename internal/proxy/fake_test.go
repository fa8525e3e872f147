package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// got is one request a fake engine received.
type got struct {
	Path   string
	Body   map[string]any
	Params map[string]any // its kv_transfer_params
}

// fakeEngine is an OpenAI server on loopback that records what it
// receives. By default it answers a completion at once with its name; a
// test may make it hold a request until released, or stream events one at
// a time.
type fakeEngine struct {
	name string
	srv  *httptest.Server
	// returns is the kv_transfer_params its answers carry.
	returns map[string]any

	mu       sync.Mutex
	received []got
	// hold, when set, makes a completion wait for a value on it (or for
	// its client to go away) before answering.
	hold chan struct{}
	// started gets a value when a completion arrives, if set.
	started chan struct{}
	// aborted gets a value when a held or streaming request's client goes
	// away.
	aborted chan struct{}
	// events, when set, makes a stream send one event per value.
	events chan string
	status int // answer this status instead, if set
}

func newFake(t *testing.T, name string) *fakeEngine {
	f := &fakeEngine{name: name, aborted: make(chan struct{}, 16)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEngine) engine(peer string) Engine {
	return Engine{URL: f.srv.URL, Peer: peer, Domain: "dom-" + f.name}
}

// set changes f's behaviour under its lock.
func (f *fakeEngine) set(fn func(f *fakeEngine)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeEngine) requests() []got {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]got(nil), f.received...)
}

func (f *fakeEngine) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" || r.URL.Path == "/v1/models" {
		f.mu.Lock()
		status := f.status
		f.mu.Unlock()
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m-%s"}]}`, f.name)
		return
	}
	b, _ := io.ReadAll(r.Body)
	g := got{Path: r.URL.Path}
	json.Unmarshal(b, &g.Body)
	g.Params, _ = g.Body["kv_transfer_params"].(map[string]any)
	f.mu.Lock()
	f.received = append(f.received, g)
	hold, started, events, status, returns := f.hold, f.started, f.events, f.status, f.returns
	f.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			f.aborted <- struct{}{}
			return
		}
	}
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"refused by %s"}}`, f.name)
		return
	}
	if stream, _ := g.Body["stream"].(bool); stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					fmt.Fprint(w, "data: [DONE]\n\n")
					return
				}
				fmt.Fprintf(w, "data: %s\n\n", ev)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				f.aborted <- struct{}{}
				return
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": "cmpl-" + f.name, "choices": []any{map[string]any{"text": "from " + f.name}}, "kv_transfer_params": returns})
}

// front serves p on loopback and returns its URL and a client for it; both
// are closed at the test's end.
func front(t *testing.T, cfg Config) (string, *http.Client, *Proxy) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	c := &http.Client{Transport: &http.Transport{}, Timeout: waitFor}
	t.Cleanup(func() {
		c.CloseIdleConnections()
		srv.Close()
		p.Close()
	})
	return srv.URL, c, p
}

// newServer serves h on loopback until the test ends and returns its URL.
func newServer(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
