package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// waitFor is how long a test waits for an event before failing: a bound
// on a broken proxy, never a pace.
const waitFor = 30 * time.Second

func recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// tokens is a prompt of n token ids, from first on.
func tokens(first, n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(first + i)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

func post(t *testing.T, c *http.Client, url, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := c.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("POST %s: %d, not JSON: %q", path, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

func text(m map[string]any) string {
	ch, _ := m["choices"].([]any)
	if len(ch) == 0 {
		return ""
	}
	c, _ := ch[0].(map[string]any)
	s, _ := c["text"].(string)
	return s
}

func role(t *testing.T, params map[string]any, key string) map[string]any {
	t.Helper()
	r, ok := params[key].(map[string]any)
	if !ok {
		t.Fatalf("kv_transfer_params %v: no %s", params, key)
	}
	return r
}

func TestSymmetricRoundRobinNamesTheHolder(t *testing.T) {
	a, b := newFake(t, "a"), newFake(t, "b")
	url, c, _ := front(t, Config{
		Pick:    PickRoundRobin,
		Engines: []Engine{a.engine("10.0.0.1:7600"), b.engine("10.0.0.2:7601")},
		Locator: NewMemory(1024),
	})
	body := `{"model":"m","prompt":` + tokens(0, 130) + `,"max_tokens":5}`
	for i, want := range []string{"from a", "from b"} {
		code, m := post(t, c, url, "/v1/completions", body)
		if code != 200 || text(m) != want {
			t.Fatalf("request %d: %d %v, want 200 %q", i, code, m, want)
		}
	}
	if ra := a.requests(); len(ra) != 1 || ra[0].Params != nil {
		t.Fatalf("a, the first to run the prompt, got %+v: want it with no kv_transfer_params", ra)
	}
	rb := b.requests()
	if len(rb) != 1 {
		t.Fatalf("b got %d requests", len(rb))
	}
	src := role(t, rb[0].Params, "remote_kv_source")
	if src["remote_host"] != "10.0.0.1" || src["remote_port"] != 7600.0 || src["remote_domain"] != "dom-a" {
		t.Errorf("b's source %v: want a's sidecar 10.0.0.1:7600 in dom-a", src)
	}
	if id, _ := src["kv_request_id"].(string); id == "" {
		t.Errorf("b's source has no kv_request_id: %v", src)
	}
	if rb[0].Body["max_tokens"] != 5.0 || rb[0].Body["model"] != "m" {
		t.Errorf("b's request lost the client's fields: %v", rb[0].Body)
	}
	// A prompt that shares no whole chunk with it names nobody.
	post(t, c, url, "/v1/completions", `{"model":"m","prompt":`+tokens(1000, 130)+`}`)
	if ra := a.requests(); len(ra) != 2 || ra[1].Params != nil {
		t.Errorf("an unrelated prompt was sent with a source: %+v", ra)
	}
}

func TestSymmetricLeastLoaded(t *testing.T) {
	a, b, c3 := newFake(t, "a"), newFake(t, "b"), newFake(t, "c")
	url, c, p := front(t, Config{
		Engines: []Engine{a.engine("10.0.0.1:7600"), b.engine("10.0.0.2:7600"), c3.engine("10.0.0.3:7600")},
		Locator: NewMemory(1024),
	})
	shared := `{"prompt":` + tokens(0, 128) + `}`
	// The prompt runs on a, which then holds it; an idle holder is picked
	// itself.
	for range 2 {
		if code, m := post(t, c, url, "/v1/completions", shared); code != 200 || text(m) != "from a" {
			t.Fatalf("%d %v: want a", code, m)
		}
	}
	// Hold a request on a (the holder, so picked while all are idle): a is
	// then the busiest, so the next request with a's prefix goes to b and
	// names a as its source.
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	a.set(func(f *fakeEngine) { f.hold, f.started = release, started })
	held := make(chan int, 1)
	go func() {
		resp, err := c.Post(url+"/v1/completions", "application/json", strings.NewReader(shared))
		if err != nil {
			held <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	recv(t, started, "the held request on a")
	if got := p.engines.load(); got[0] != 1 {
		t.Fatalf("in flight %v: want one on a", got)
	}
	if code, m := post(t, c, url, "/v1/completions", shared); code != 200 || text(m) != "from b" {
		t.Fatalf("%d %v: want b, the least loaded after a", code, m)
	}
	rb := b.requests()
	if src := role(t, rb[len(rb)-1].Params, "remote_kv_source"); src["remote_host"] != "10.0.0.1" {
		t.Errorf("b's source %v: want a", src)
	}
	close(release)
	if code := <-held; code != 200 {
		t.Errorf("held request: %d", code)
	}
	if got := p.engines.load(); got[0]+got[1]+got[2] != 0 {
		t.Errorf("in flight after every request ended: %v", got)
	}
}

func TestClientParamsPassThrough(t *testing.T) {
	a, b := newFake(t, "a"), newFake(t, "b")
	url, c, _ := front(t, Config{Pick: PickRoundRobin, Engines: []Engine{a.engine("h:1"), b.engine("h:2")}, Locator: NewMemory(64)})
	body := `{"prompt":` + tokens(0, 64) + `,"kv_transfer_params":{"remote_kv_source":{"remote_host":"x","remote_port":9,"kv_request_id":"mine"}}}`
	post(t, c, url, "/v1/completions", body)
	post(t, c, url, "/v1/completions", body)
	for _, g := range append(a.requests(), b.requests()...) {
		if src := role(t, g.Params, "remote_kv_source"); src["kv_request_id"] != "mine" || src["remote_host"] != "x" {
			t.Errorf("the client's kv_transfer_params changed: %v", g.Params)
		}
	}
}

func TestPD(t *testing.T) {
	pf, dc := newFake(t, "p"), newFake(t, "d")
	pf.set(func(f *fakeEngine) {
		f.returns = map[string]any{"remote_block_ids": []any{1.0, 2.0}, "remote_decoder": map[string]any{"kv_request_id": "echo"}}
	})
	url, c, _ := front(t, Config{Mode: ModePD, Prefillers: []Engine{pf.engine("10.0.0.9:7700")}, Decoders: []Engine{dc.engine("")}})
	code, m := post(t, c, url, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":50,"max_completion_tokens":50,"min_tokens":3,"stream_options":{"include_usage":true}}`)
	if code != 200 || text(m) != "from d" {
		t.Fatalf("%d %v: want the decoder's answer", code, m)
	}
	rp, rd := pf.requests(), dc.requests()
	if len(rp) != 1 || len(rd) != 1 {
		t.Fatalf("prefiller got %d, decoder %d requests: want 1 each", len(rp), len(rd))
	}
	pb := rp[0].Body
	if pb["max_tokens"] != 1.0 || pb["max_completion_tokens"] != 1.0 || pb["stream"] != false || pb["min_tokens"] != nil || pb["stream_options"] != nil {
		t.Errorf("prefill leg %v: want max_tokens 1, stream false, no min_tokens or stream_options", pb)
	}
	id, _ := role(t, rp[0].Params, "remote_decoder")["kv_request_id"].(string)
	if id == "" || len(rp[0].Params) != 1 {
		t.Fatalf("prefill leg's kv_transfer_params %v: want remote_decoder with an id only", rp[0].Params)
	}
	db := rd[0].Body
	if db["max_tokens"] != 50.0 || db["min_tokens"] != 3.0 || rd[0].Path != "/v1/chat/completions" {
		t.Errorf("decode leg %s %v: want the client's request", rd[0].Path, db)
	}
	src := role(t, rd[0].Params, "remote_prefiller")
	if src["kv_request_id"] != id || src["remote_host"] != "10.0.0.9" || src["remote_port"] != 7700.0 || src["remote_domain"] != "dom-p" {
		t.Errorf("decode leg's remote_prefiller %v: want the prefiller's sidecar and id %s", src, id)
	}
	if _, ok := rd[0].Params["remote_decoder"]; ok {
		t.Errorf("decode leg carries remote_decoder: %v", rd[0].Params)
	}
	if ids, _ := rd[0].Params["remote_block_ids"].([]any); len(ids) != 2 {
		t.Errorf("decode leg lost what the prefiller returned: %v", rd[0].Params)
	}
	// Every request gets its own id.
	post(t, c, url, "/v1/completions", `{"prompt":"x"}`)
	if id2 := role(t, pf.requests()[1].Params, "remote_decoder")["kv_request_id"]; id2 == id {
		t.Errorf("two requests share kv_request_id %v", id)
	}
}

func TestPDPrefillerRefusalIsRelayed(t *testing.T) {
	pf, dc := newFake(t, "p"), newFake(t, "d")
	pf.set(func(f *fakeEngine) { f.status = http.StatusBadRequest })
	url, c, _ := front(t, Config{Mode: ModePD, Prefillers: []Engine{pf.engine("h:1")}, Decoders: []Engine{dc.engine("")}})
	code, m := post(t, c, url, "/v1/completions", `{"prompt":"x"}`)
	if code != 400 || !strings.Contains(fmt.Sprint(m), "refused by p") {
		t.Errorf("%d %v: want the prefiller's 400", code, m)
	}
	if n := len(dc.requests()); n != 0 {
		t.Errorf("decoder got %d requests after the prefill was refused", n)
	}
}

// readEvent reads one server-sent event's data line.
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			return d
		}
	}
}

// TestStreamingUnbuffered: each event reaches the client before the engine
// sends the next one, in both modes.
func TestStreamingUnbuffered(t *testing.T) {
	for _, mode := range []Mode{ModeSymmetric, ModePD} {
		t.Run(mode.String(), func(t *testing.T) {
			e, pf := newFake(t, "e"), newFake(t, "p")
			events := make(chan string)
			e.set(func(f *fakeEngine) { f.events = events })
			cfg := Config{Engines: []Engine{e.engine("h:1")}}
			if mode == ModePD {
				cfg = Config{Mode: ModePD, Prefillers: []Engine{pf.engine("h:1")}, Decoders: []Engine{e.engine("")}}
			}
			url, c, _ := front(t, cfg)
			resp, err := c.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
				t.Fatalf("%d %q: want 200 text/event-stream", resp.StatusCode, ct)
			}
			r := bufio.NewReader(resp.Body)
			for i := range 3 {
				ev := fmt.Sprintf(`{"n":%d}`, i)
				events <- ev // the engine sends it; the next send waits for the client
				if got := readEvent(t, r); got != ev {
					t.Fatalf("event %d: %q, want %q", i, got, ev)
				}
			}
			close(events)
			if got := readEvent(t, r); got != "[DONE]" {
				t.Fatalf("last event %q", got)
			}
			if mode == ModePD && pf.requests()[0].Body["stream"] != false {
				t.Errorf("the prefill leg streamed: %v", pf.requests()[0].Body)
			}
		})
	}
}

// TestDisconnectAbortsLegs: a client that goes away ends the leg in
// flight: the prefill (and no decode starts), the decode, or a symmetric
// request.
func TestDisconnectAbortsLegs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     Mode
		blockOn  string // which engine holds the request: "p" or "d"
		stream   bool
		noDecode bool
	}{
		{name: "symmetric", blockOn: "d"},
		{name: "symmetric stream", blockOn: "d", stream: true},
		{name: "pd during prefill", mode: ModePD, blockOn: "p", noDecode: true},
		{name: "pd during decode", mode: ModePD, blockOn: "d"},
		{name: "pd during decode stream", mode: ModePD, blockOn: "d", stream: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pf, d := newFake(t, "p"), newFake(t, "d")
			started := make(chan struct{}, 1)
			blocked := d
			if tc.blockOn == "p" {
				blocked = pf
			}
			blocked.set(func(f *fakeEngine) {
				f.started = started
				if tc.stream {
					f.events = make(chan string) // never sends
				} else {
					f.hold = make(chan struct{}) // never released
				}
			})
			cfg := Config{Engines: []Engine{d.engine("h:1")}}
			if tc.mode == ModePD {
				cfg = Config{Mode: ModePD, Prefillers: []Engine{pf.engine("h:1")}, Decoders: []Engine{d.engine("")}}
			}
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			handled := make(chan struct{})
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(handled)
				p.ServeHTTP(w, r)
			}))
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			c := &http.Client{Transport: &http.Transport{}, Timeout: waitFor}
			defer c.CloseIdleConnections()
			go func() {
				body := fmt.Sprintf(`{"prompt":"x","stream":%v}`, tc.stream)
				req, _ := http.NewRequestWithContext(ctx, "POST", srv+"/v1/completions", strings.NewReader(body))
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				errc <- err
			}()
			recv(t, started, "the leg to start")
			cancel()
			recv(t, blocked.aborted, "the engine to see its request aborted")
			recv(t, handled, "the proxy's handler to return")
			if err := <-errc; err == nil {
				t.Error("the client's request succeeded after it was cancelled")
			}
			if tc.noDecode && len(d.requests()) != 0 {
				t.Error("the decode leg started after the client went away")
			}
			if l := p.prefill; l != nil && l.load()[0] != 0 {
				t.Errorf("prefiller still counts %v in flight", l.load())
			}
		})
	}
}
