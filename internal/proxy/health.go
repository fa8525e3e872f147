package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// models answers /v1/models from one engine (the decoders in PD: the
// engines that answer clients); every engine serves the same model.
func (p *Proxy) models(w http.ResponseWriter, r *http.Request) {
	pl, es := p.engines, p.cfg.Engines
	if p.cfg.Mode == ModePD {
		pl, es = p.decode, p.cfg.Decoders
	}
	i := pl.acquire(-1)
	defer pl.release(i)
	resp, done, err := p.leg(r, es[i], http.MethodGet, nil)
	if err != nil {
		p.upstreamError(w, r, "engine", es[i], err)
		return
	}
	defer done()
	relay(w, resp)
}

// engineHealth is one engine's line in /health's answer.
type engineHealth struct {
	Role     string `json:"role"`
	URL      string `json:"url"`
	Healthy  bool   `json:"healthy"`
	InFlight int    `json:"in_flight"`
	Error    string `json:"error,omitempty"`
}

// health asks every engine's /health at once, each within HealthTimeout,
// and answers 200 when every role has a healthy engine, else 503, with
// each engine's state as JSON.
func (p *Proxy) health(w http.ResponseWriter, r *http.Request) {
	type role struct {
		name string
		pool *pool
		es   []Engine
	}
	roles := []role{{"engine", p.engines, p.cfg.Engines}}
	if p.cfg.Mode == ModePD {
		roles = []role{{"prefiller", p.prefill, p.cfg.Prefillers}, {"decoder", p.decode, p.cfg.Decoders}}
	}
	var out []engineHealth
	for _, ro := range roles {
		for i, load := range ro.pool.load() {
			out = append(out, engineHealth{Role: ro.name, URL: ro.es[i].URL, InFlight: load})
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.HealthTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for k := range out {
		wg.Go(func() {
			resp, err := p.send(ctx, Engine{URL: out[k].URL}, http.MethodGet, "/health", nil, http.Header{})
			if err != nil {
				out[k].Error = err.Error()
				return
			}
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			out[k].Healthy = resp.StatusCode == http.StatusOK
			if !out[k].Healthy {
				out[k].Error = resp.Status
			}
		})
	}
	wg.Wait()
	status := http.StatusOK
	for _, ro := range roles {
		up := false
		for _, h := range out {
			up = up || (h.Role == ro.name && h.Healthy)
		}
		if !up {
			status = http.StatusServiceUnavailable
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"healthy": status == http.StatusOK, "mode": p.cfg.Mode.String(), "engines": out})
}
