package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// hopHeaders are a response's headers that belong to one connection, not
// to the response relayed on another.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Transfer-Encoding": true,
	"Te": true, "Trailer": true, "Upgrade": true, "Content-Length": true,
}

// send POSTs (or GETs, with a nil body) path to engine e. The request ends
// with ctx; the caller closes the response's body.
func (p *Proxy) send(ctx context.Context, e Engine, method, path string, body []byte, from http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(e.URL, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// What identifies the client to the engine (vLLM's --api-key) and the
	// request (vLLM logs X-Request-Id) passes through.
	for _, h := range []string{"Authorization", "X-Request-Id", "Accept"} {
		if v := from.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	return p.client.Do(req)
}

// relay writes resp to w as it arrives: each read is written and flushed,
// so that a stream's events reach the client when the engine sends them.
// It returns the first error reading the engine or writing the client.
func relay(w http.ResponseWriter, resp *http.Response) error {
	for k, vs := range resp.Header {
		if !hopHeaders[k] {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	// The status goes out now: a stream's client learns that it started
	// before its first event.
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// writeError answers with OpenAI's error shape.
func writeError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
	w.Write(append(b, '\n'))
}

// upstreamError answers for a leg to engine e that failed before its
// response began: nothing if the client itself went away (no one to
// answer), 504 if the leg timed out, 502 otherwise.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, role string, e Engine, err error) {
	switch {
	case r.Context().Err() != nil:
		p.cfg.Log.Info("proxy: client went away", "path", r.URL.Path, "role", role, "engine", e.URL)
	case errors.Is(err, context.DeadlineExceeded):
		p.cfg.Log.Warn("proxy: engine timed out", "role", role, "engine", e.URL, "err", err)
		writeError(w, http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("%s %s did not answer within %v", role, e.URL, p.cfg.LegTimeout))
	default:
		p.cfg.Log.Warn("proxy: engine failed", "role", role, "engine", e.URL, "err", err)
		writeError(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("%s %s: %v", role, e.URL, err))
	}
}
