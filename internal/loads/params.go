package loads

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// Remote names a counterpart of a request, as the router sets it in the
// request's kv_transfer_params.
type Remote struct {
	KVRequestID  string `json:"kv_request_id" yaml:"kv_request_id"`
	RemoteHost   string `json:"remote_host,omitempty" yaml:"remote_host,omitempty"`
	RemotePort   int    `json:"remote_port,omitempty" yaml:"remote_port,omitempty"`
	RemoteDomain string `json:"remote_domain,omitempty" yaml:"remote_domain,omitempty"`
}

// TransferParams are a request's transfer parameters (vLLM's role keys).
//   - RemotePrefiller: PD consumer; pull this request's blocks from the prefill rank.
//   - RemoteKVSource: symmetric consumer; look up, then pull the hits.
//   - RemoteDecoder: PD producer; hold the blocks until the decoder fetches them.
//
// The only legal combination of two keys is RemoteDecoder + RemoteKVSource.
type TransferParams struct {
	RemotePrefiller *Remote `json:"remote_prefiller,omitempty" yaml:"remote_prefiller,omitempty"`
	RemoteKVSource  *Remote `json:"remote_kv_source,omitempty" yaml:"remote_kv_source,omitempty"`
	RemoteDecoder   *Remote `json:"remote_decoder,omitempty" yaml:"remote_decoder,omitempty"`
}

// ErrBadParams wraps every transfer-parameter error.
var ErrBadParams = errors.New("loads: bad transfer parameters")

// source is where a consumer request pulls from.
type source struct {
	kvID   string
	peer   string
	domain string
	pd     bool // PD: every key is a hit, no lookup
}

// dest is a producer request's binding key; kvID may be empty (then its
// stores fail, as in vLLM). peer is the decoder's peer id when
// remote_decoder names it (remote_host and remote_port): then only that
// peer may fetch the request's blocks (handoff.go).
type dest struct{ kvID, peer string }

func parseParams(p TransferParams) (*source, *dest, error) {
	switch {
	case p.RemotePrefiller != nil && p.RemoteDecoder != nil:
		return nil, nil, fmt.Errorf("%w: remote_prefiller with remote_decoder", ErrBadParams)
	case p.RemotePrefiller != nil && p.RemoteKVSource != nil:
		return nil, nil, fmt.Errorf("%w: remote_prefiller with remote_kv_source", ErrBadParams)
	}
	var src *source
	var err error
	if p.RemotePrefiller != nil {
		src, err = parseSource(p.RemotePrefiller, true)
	} else if p.RemoteKVSource != nil {
		src, err = parseSource(p.RemoteKVSource, false)
	}
	if err != nil {
		return nil, nil, err
	}
	var dst *dest
	if d := p.RemoteDecoder; d != nil {
		dst = &dest{kvID: d.KVRequestID}
		switch {
		case d.RemoteHost == "" && d.RemotePort == 0:
		case d.RemoteHost == "" || d.RemotePort <= 0 || d.RemotePort > 65535:
			return nil, nil, fmt.Errorf("%w: remote_decoder remote_host %q remote_port %d", ErrBadParams, d.RemoteHost, d.RemotePort)
		default:
			dst.peer = canonPeer(net.JoinHostPort(d.RemoteHost, strconv.Itoa(d.RemotePort)))
		}
	}
	return src, dst, nil
}

func parseSource(r *Remote, pd bool) (*source, error) {
	if r.KVRequestID == "" {
		return nil, fmt.Errorf("%w: empty kv_request_id", ErrBadParams)
	}
	if r.RemoteHost == "" || r.RemotePort <= 0 || r.RemotePort > 65535 {
		return nil, fmt.Errorf("%w: remote_host %q remote_port %d", ErrBadParams, r.RemoteHost, r.RemotePort)
	}
	return &source{
		kvID:   r.KVRequestID,
		peer:   net.JoinHostPort(r.RemoteHost, strconv.Itoa(r.RemotePort)),
		domain: r.RemoteDomain,
		pd:     pd,
	}, nil
}

// canonPeer is a host:port peer id with its address, if it is one, in
// canonical form (IPv4-mapped IPv6 unmapped, IPv6 compressed), so that a
// decoder named as [::ffff:10.0.0.7]:7600 or [2001:db8:0:0::1]:7600 is the
// peer whose id says 10.0.0.7:7600 or [2001:db8::1]:7600. A host name is
// left as it is.
func canonPeer(id string) string {
	ap, err := netip.ParseAddrPort(id)
	if err != nil {
		return id
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}
