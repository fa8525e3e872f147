package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"
)

// Mode is how the proxy splits a request over the fleet.
type Mode int

const (
	// ModeSymmetric sends each request whole to one engine.
	ModeSymmetric Mode = iota
	// ModePD prefills on a prefiller, then decodes on a decoder.
	ModePD
)

func (m Mode) String() string {
	if m == ModePD {
		return "pd"
	}
	return "symmetric"
}

// Pick is how an engine is chosen among those of one role.
type Pick int

const (
	// PickLeastLoaded takes the engine with the fewest requests in flight
	// through this proxy; ties go round-robin.
	PickLeastLoaded Pick = iota
	// PickRoundRobin takes the engines in turn, whatever their load.
	PickRoundRobin
)

func (p Pick) String() string {
	if p == PickRoundRobin {
		return "round-robin"
	}
	return "least-loaded"
}

// Engine is one vLLM engine behind the proxy.
type Engine struct {
	// URL is the engine's OpenAI server, e.g. http://10.0.0.7:8000.
	URL string
	// Peer is the engine's kvp2p sidecar as peers reach it (its peer_id,
	// host:port): what the proxy puts in remote_host and remote_port when
	// it names this engine as a source. Required for a prefiller, and for
	// every engine of a symmetric fleet with a Locator.
	Peer string
	// Domain is the sidecar's failure domain (remote_domain); optional.
	Domain string
}

// Config configures a Proxy. Zero fields take the defaults below.
type Config struct {
	Mode Mode
	Pick Pick
	// Engines serve whole requests (ModeSymmetric).
	Engines []Engine
	// Prefillers and Decoders are the two roles of ModePD.
	Prefillers, Decoders []Engine
	// Locator, in ModeSymmetric, says which engine probably holds a
	// prompt's prefix, so that the proxy names it as the source; nil names
	// none (the engines find a prefix themselves, or recompute it).
	Locator Locator
	// MaxBodyBytes bounds a request's body, and a prefiller's response
	// read whole; default 16 MiB.
	MaxBodyBytes int64
	// ConnectTimeout bounds connecting to an engine; default 5 s.
	ConnectTimeout time.Duration
	// LegTimeout bounds each request to an engine, from sending it to the
	// end of its response (a stream included); 0 means no bound.
	LegTimeout time.Duration
	// HealthTimeout bounds each engine's /health check; default 2 s.
	HealthTimeout time.Duration
	// Log receives one line per failed request; nil discards.
	Log *slog.Logger
}

const (
	defaultMaxBody       = 16 << 20
	defaultConnect       = 5 * time.Second
	defaultHealthTimeout = 2 * time.Second
)

// withDefaults returns c with its zero fields defaulted, or the first
// error in it.
func (c Config) withDefaults() (Config, error) {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = defaultMaxBody
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = defaultConnect
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = defaultHealthTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.MaxBodyBytes < 0:
		return c, errors.New("proxy: MaxBodyBytes must not be negative")
	case c.ConnectTimeout < 0, c.LegTimeout < 0, c.HealthTimeout < 0:
		return c, errors.New("proxy: timeouts must not be negative")
	case c.Pick != PickLeastLoaded && c.Pick != PickRoundRobin:
		return c, fmt.Errorf("proxy: unknown pick %d", c.Pick)
	}
	switch c.Mode {
	case ModeSymmetric:
		if len(c.Engines) == 0 {
			return c, errors.New("proxy: symmetric mode needs at least one engine")
		}
		if len(c.Prefillers)+len(c.Decoders) > 0 {
			return c, errors.New("proxy: prefillers and decoders are for pd mode")
		}
		return c, checkEngines("engine", c.Engines, c.Locator != nil)
	case ModePD:
		if len(c.Prefillers) == 0 || len(c.Decoders) == 0 {
			return c, errors.New("proxy: pd mode needs at least one prefiller and one decoder")
		}
		if len(c.Engines) > 0 {
			return c, errors.New("proxy: engines are for symmetric mode; pd mode takes prefillers and decoders")
		}
		if c.Locator != nil {
			return c, errors.New("proxy: a locator is for symmetric mode")
		}
		if err := checkEngines("prefiller", c.Prefillers, true); err != nil {
			return c, err
		}
		return c, checkEngines("decoder", c.Decoders, false)
	}
	return c, fmt.Errorf("proxy: unknown mode %d", c.Mode)
}

func checkEngines(role string, es []Engine, needPeer bool) error {
	for i, e := range es {
		u, err := url.Parse(e.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("proxy: %s %d: URL %q is not an http(s) URL with a host", role, i, e.URL)
		}
		if e.Peer == "" {
			if needPeer {
				return fmt.Errorf("proxy: %s %s: needs its kvp2p peer (host:port) to be named as a source", role, e.URL)
			}
			continue
		}
		if _, _, err := splitPeer(e.Peer); err != nil {
			return fmt.Errorf("proxy: %s %s: %w", role, e.URL, err)
		}
	}
	return nil
}

// splitPeer splits a sidecar's peer id into remote_host and remote_port.
func splitPeer(peer string) (string, int, error) {
	host, port, err := net.SplitHostPort(peer)
	if err != nil {
		return "", 0, fmt.Errorf("peer %q: %w", peer, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 || host == "" {
		return "", 0, fmt.Errorf("peer %q: want host:port with a port in 1-65535", peer)
	}
	return host, n, nil
}
