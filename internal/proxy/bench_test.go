package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkMemory is the prefix memory's cost per request for a prompt of
// 4096 token ids: keying it, locating it, recording it.
func BenchmarkMemory(b *testing.B) {
	m := NewMemory(1 << 16)
	p := Prompt{Model: "m", Tokens: tok(0, 4096)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.Locate(ctx, p)
		m.Served(p, 1)
	}
}

// BenchmarkRelay is one small completion on loopback, straight to a fake
// engine and through the proxy (symmetric, prefix memory on), in one run:
// the difference is what the proxy adds per request.
func BenchmarkRelay(b *testing.B) {
	engine := newServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	p, err := New(Config{Engines: []Engine{{URL: engine, Peer: "127.0.0.1:7600"}}, Locator: NewMemory(1 << 16)})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	front := newServer(b, p)
	body := `{"model":"m","prompt":` + tokens(0, 1024) + `,"max_tokens":1}`
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	for _, bc := range []struct{ name, url string }{{"direct", engine}, {"proxy", front}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := c.Post(bc.url+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}
