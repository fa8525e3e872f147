package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestBadInput(t *testing.T) {
	a := newFake(t, "a")
	pf := newFake(t, "p")
	url, c, _ := front(t, Config{Engines: []Engine{a.engine("h:1")}, MaxBodyBytes: 1 << 10})
	pdURL, _, _ := front(t, Config{Mode: ModePD, Prefillers: []Engine{pf.engine("h:1")}, Decoders: []Engine{a.engine("")}})
	for _, tc := range []struct {
		url, method, path, body string
		code                    int
		says                    string
	}{
		{url, "POST", "/v1/completions", `not json`, 400, "JSON object"},
		{url, "POST", "/v1/completions", `[1,2]`, 400, "JSON object"},
		{url, "POST", "/v1/completions", `null`, 400, "JSON object"},
		{url, "POST", "/v1/completions", ``, 400, "JSON object"},
		{url, "POST", "/v1/completions", `{"model":"m"}`, 400, "prompt is required"},
		{url, "POST", "/v1/completions", `{"prompt":{}}`, 400, "prompt must be"},
		{url, "POST", "/v1/completions", `{"prompt":[1,"a"]}`, 400, "prompt must be"},
		{url, "POST", "/v1/completions", `{"prompt":"x","stream":"yes"}`, 400, "stream must be a boolean"},
		{url, "POST", "/v1/completions", `{"prompt":"x","model":3}`, 400, "model must be a string"},
		{url, "POST", "/v1/completions", `{"prompt":"x","kv_transfer_params":"a"}`, 400, "kv_transfer_params must be an object"},
		{url, "POST", "/v1/chat/completions", `{"prompt":"x"}`, 400, "messages must be"},
		{url, "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "messages must be"},
		{url, "POST", "/v1/completions", `{"prompt":"` + strings.Repeat("x", 2000) + `"}`, 413, "over 1024 bytes"},
		{url, "GET", "/v1/completions", ``, 405, "does not take GET"},
		{url, "PUT", "/health", ``, 405, "does not take PUT"},
		{url, "POST", "/v1/embeddings", `{}`, 404, "no route"},
		{pdURL, "POST", "/v1/completions", `{"prompt":"x","kv_transfer_params":{}}`, 400, "set by the proxy"},
	} {
		req, _ := http.NewRequest(tc.method, tc.url+tc.path, strings.NewReader(tc.body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m struct {
			Error struct {
				Message string
				Code    int
			}
		}
		if resp.StatusCode != tc.code || json.Unmarshal(b, &m) != nil || m.Error.Code != tc.code || !strings.Contains(m.Error.Message, tc.says) {
			t.Errorf("%s %s %.40q: %d %s; want %d saying %q", tc.method, tc.path, tc.body, resp.StatusCode, b, tc.code, tc.says)
		}
	}
	if n := len(a.requests()) + len(pf.requests()); n != 0 {
		t.Errorf("bad requests reached the engines: %d", n)
	}
}

func TestUpstreamFailures(t *testing.T) {
	gone := newFake(t, "gone")
	gone.srv.Close() // its port now refuses connections
	slow := newFake(t, "slow")
	slow.set(func(f *fakeEngine) { f.hold = make(chan struct{}) })
	ok := newFake(t, "ok")

	url, c, _ := front(t, Config{Engines: []Engine{gone.engine("h:1")}})
	if code, m := post(t, c, url, "/v1/completions", `{"prompt":"x"}`); code != 502 || !strings.Contains(m["error"].(map[string]any)["message"].(string), gone.srv.URL) {
		t.Errorf("engine down: %d %v, want 502 naming it", code, m)
	}
	pdURL, _, _ := front(t, Config{Mode: ModePD, Prefillers: []Engine{ok.engine("h:1")}, Decoders: []Engine{gone.engine("")}})
	if code, m := post(t, c, pdURL, "/v1/completions", `{"prompt":"x"}`); code != 502 || !strings.Contains(m["error"].(map[string]any)["message"].(string), "decoder") {
		t.Errorf("decoder down: %d %v, want 502 naming the decoder", code, m)
	}
	// The timeout only has to fire: the engine never answers.
	slowURL, _, _ := front(t, Config{Engines: []Engine{slow.engine("h:1")}, LegTimeout: 100 * time.Millisecond})
	if code, m := post(t, c, slowURL, "/v1/completions", `{"prompt":"x"}`); code != 504 {
		t.Errorf("engine too slow: %d %v, want 504", code, m)
	}
	recv(t, slow.aborted, "the slow engine to see its request aborted")
}

func TestHealthAndModels(t *testing.T) {
	up, down := newFake(t, "up"), newFake(t, "down")
	down.set(func(f *fakeEngine) { f.status = http.StatusServiceUnavailable })
	url, c, _ := front(t, Config{Pick: PickRoundRobin, Engines: []Engine{down.engine(""), up.engine("")}})
	get := func(url, path string) (int, string) {
		resp, err := c.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(url, "/health"); code != 200 || !strings.Contains(body, `"healthy":false`) || !strings.Contains(body, `"healthy":true`) {
		t.Errorf("one engine of two up: %d %s; want 200 listing both", code, body)
	}
	pdURL, _, _ := front(t, Config{Mode: ModePD, Prefillers: []Engine{down.engine("h:1")}, Decoders: []Engine{up.engine("")}})
	if code, body := get(pdURL, "/health"); code != 503 || !strings.Contains(body, `"role":"prefiller"`) {
		t.Errorf("no prefiller up: %d %s; want 503", code, body)
	}
	if code, body := get(pdURL, "/v1/models"); code != 200 || !strings.Contains(body, "m-up") {
		t.Errorf("/v1/models in pd: %d %s; want the decoder's list", code, body)
	}
}

func TestConfigErrors(t *testing.T) {
	e := Engine{URL: "http://127.0.0.1:1", Peer: "127.0.0.1:7600"}
	for _, tc := range []struct {
		cfg  Config
		says string
	}{
		{Config{}, "at least one engine"},
		{Config{Engines: []Engine{{URL: "127.0.0.1:80"}}}, "not an http(s) URL"},
		{Config{Engines: []Engine{{URL: "http://h"}}, Locator: NewMemory(1)}, "needs its kvp2p peer"},
		{Config{Engines: []Engine{{URL: "http://h", Peer: "h"}}}, "missing port"},
		{Config{Engines: []Engine{{URL: "http://h", Peer: "h:0"}}}, "port in 1-65535"},
		{Config{Mode: ModePD, Prefillers: []Engine{e}}, "at least one prefiller and one decoder"},
		{Config{Mode: ModePD, Prefillers: []Engine{{URL: "http://h"}}, Decoders: []Engine{e}}, "needs its kvp2p peer"},
		{Config{Mode: ModePD, Prefillers: []Engine{e}, Decoders: []Engine{e}, Engines: []Engine{e}}, "engines are for symmetric"},
		{Config{Engines: []Engine{e}, Decoders: []Engine{e}}, "for pd mode"},
		{Config{Engines: []Engine{e}, LegTimeout: -1}, "negative"},
		{Config{Engines: []Engine{e}, Pick: 7}, "unknown pick"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v): %v; want an error saying %q", tc.cfg, err, tc.says)
		}
	}
}
