package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

// Proxy is the OpenAI-compatible front; see the package doc.
type Proxy struct {
	cfg    Config
	client *http.Client
	mux    *http.ServeMux
	// engines serve whole requests (symmetric); prefill and decode are
	// PD's roles.
	engines, prefill, decode *pool
}

// New returns a Proxy for cfg, or cfg's first error.
func New(cfg Config) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.ConnectTimeout}).DialContext,
		MaxIdleConnsPerHost: 64,
		// A response may be an event stream: never gzip it on the way.
		DisableCompression: true,
	}
	p := &Proxy{cfg: cfg, client: &http.Client{Transport: tr}, mux: http.NewServeMux()}
	if cfg.Mode == ModePD {
		p.prefill, p.decode = newPool(cfg.Prefillers, cfg.Pick), newPool(cfg.Decoders, cfg.Pick)
	} else {
		p.engines = newPool(cfg.Engines, cfg.Pick)
	}
	p.mux.HandleFunc("POST /v1/completions", p.completion(false))
	p.mux.HandleFunc("POST /v1/chat/completions", p.completion(true))
	p.mux.HandleFunc("GET /v1/models", p.models)
	p.mux.HandleFunc("GET /health", p.health)
	p.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return p, nil
}

// ServeHTTP answers one client request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The mux's own 405 is plain text: give it OpenAI's shape.
	if _, pattern := p.mux.Handler(r); pattern == "" || pattern == "/" {
		switch r.URL.Path {
		case "/v1/completions", "/v1/chat/completions", "/v1/models", "/health":
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s does not take %s", r.URL.Path, r.Method))
			return
		}
	}
	p.mux.ServeHTTP(w, r)
}

// Close closes the proxy's idle connections to the engines.
func (p *Proxy) Close() { p.client.CloseIdleConnections() }

func (p *Proxy) completion(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the body is over %d bytes", p.cfg.MaxBodyBytes))
				return
			}
			writeError(w, http.StatusBadRequest, "invalid_request_error", "reading the body: "+err.Error())
			return
		}
		req, err := parseRequest(body, chat)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		if p.cfg.Mode == ModePD {
			p.servePD(w, r, req)
		} else {
			p.serveSymmetric(w, r, req, body)
		}
	}
}

// leg sends one request to engine e under the leg timeout; done ends it
// (after its response has been read) and must be called.
func (p *Proxy) leg(r *http.Request, e Engine, method string, body []byte) (resp *http.Response, done func(), err error) {
	ctx, cancel := r.Context(), context.CancelFunc(func() {})
	if p.cfg.LegTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, p.cfg.LegTimeout)
	}
	resp, err = p.send(ctx, e, method, r.URL.Path, body, r.Header)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return resp, func() { resp.Body.Close(); cancel() }, nil
}

func (p *Proxy) serveSymmetric(w http.ResponseWriter, r *http.Request, req *request, body []byte) {
	holder := -1
	if p.cfg.Locator != nil && req.promptOK && !req.ownParams {
		if i, ok := p.cfg.Locator.Locate(r.Context(), req.prompt); ok && i >= 0 && i < len(p.cfg.Engines) {
			holder = i
		}
	}
	i := p.engines.acquire(holder)
	defer p.engines.release(i)
	e := p.cfg.Engines[i]
	if holder >= 0 && holder != i {
		params, err := sourceParams("remote_kv_source", p.cfg.Engines[holder], newKVID())
		if err == nil {
			body, err = req.body(map[string]any{"kv_transfer_params": params})
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
			return
		}
	}
	resp, done, err := p.leg(r, e, http.MethodPost, body)
	if err != nil {
		p.upstreamError(w, r, "engine", e, err)
		return
	}
	defer done()
	if p.cfg.Locator != nil && req.promptOK && resp.StatusCode/100 == 2 {
		p.cfg.Locator.Served(req.prompt, i)
	}
	if err := relay(w, resp); err != nil && r.Context().Err() == nil {
		p.cfg.Log.Warn("proxy: relaying the response failed", "engine", e.URL, "err", err)
	}
}

// servePD runs the prefill leg, then the decode leg; the client gets the
// decoder's response, or the prefiller's if it refused the request.
func (p *Proxy) servePD(w http.ResponseWriter, r *http.Request, req *request) {
	if req.ownParams {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "kv_transfer_params are set by the proxy in pd mode")
		return
	}
	kvID := newKVID()
	pi := p.prefill.acquire(-1)
	pe := p.cfg.Prefillers[pi]
	returned, ok := p.prefillLeg(w, r, req, pe, kvID)
	p.prefill.release(pi)
	if !ok {
		return
	}
	params, err := sourceParams("remote_prefiller", pe, kvID)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	// What the prefiller returned goes on to the decoder (a connector's own
	// fields), except the roles: the proxy names them.
	for k, v := range returned {
		switch k {
		case "remote_prefiller", "remote_decoder", "remote_kv_source":
		default:
			params[k] = v
		}
	}
	body, err := req.body(map[string]any{"kv_transfer_params": params})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	di := p.decode.acquire(-1)
	defer p.decode.release(di)
	de := p.cfg.Decoders[di]
	resp, done, err := p.leg(r, de, http.MethodPost, body)
	if err != nil {
		p.upstreamError(w, r, "decoder", de, err)
		return
	}
	defer done()
	if err := relay(w, resp); err != nil && r.Context().Err() == nil {
		p.cfg.Log.Warn("proxy: relaying the decoder's response failed", "engine", de.URL, "err", err)
	}
}

// prefillLeg runs req on prefiller pe with max_tokens 1, no stream and
// remote_decoder, and returns the kv_transfer_params its response carried.
// ok false: it has answered the client.
func (p *Proxy) prefillLeg(w http.ResponseWriter, r *http.Request, req *request, pe Engine, kvID string) (map[string]json.RawMessage, bool) {
	set := map[string]any{
		"max_tokens":         1,
		"stream":             false,
		"kv_transfer_params": map[string]any{"remote_decoder": map[string]any{"kv_request_id": kvID}},
	}
	if _, ok := req.fields["max_completion_tokens"]; ok {
		set["max_completion_tokens"] = 1
	}
	body, err := req.body(set, "stream_options", "min_tokens")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return nil, false
	}
	resp, done, err := p.leg(r, pe, http.MethodPost, body)
	if err != nil {
		p.upstreamError(w, r, "prefiller", pe, err)
		return nil, false
	}
	defer done()
	if resp.StatusCode/100 != 2 {
		// The engine's refusal (a prompt too long, say) is the client's
		// answer.
		relay(w, resp)
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, p.cfg.MaxBodyBytes+1))
	if err == nil && int64(len(out)) > p.cfg.MaxBodyBytes {
		err = fmt.Errorf("response over %d bytes", p.cfg.MaxBodyBytes)
	}
	if err != nil {
		p.upstreamError(w, r, "prefiller", pe, err)
		return nil, false
	}
	var got struct {
		Params map[string]json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(out, &got) != nil {
		writeError(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("prefiller %s: its response is not a JSON object", pe.URL))
		return nil, false
	}
	return got.Params, true
}

// newKVID is a fresh kv_request_id: it correlates a transfer's lookup,
// fetch and done between two sidecars, so it must not repeat.
func newKVID() string {
	var b [12]byte
	rand.Read(b[:])
	return "kvp2p-proxy-" + hex.EncodeToString(b[:])
}
