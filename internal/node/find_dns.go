package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Resolver looks up a host's addresses (network "ip": its A and AAAA
// records). *net.Resolver is one; tests give a fake.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// dnsEntry is one find.dns entry: a name whose addresses, each with port,
// are members.
type dnsEntry struct {
	spec       string // as configured: the key of its answers
	host, port string
}

// parseDNSEntries splits find.dns: comma-separated host:port.
func parseDNSEntries(s string) ([]dnsEntry, error) {
	var out []dnsEntry
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		h, p, err := net.SplitHostPort(e)
		if err != nil {
			return nil, fmt.Errorf("kvp2p: config: find.dns %q: %v (want name:port)", e, err)
		}
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("kvp2p: config: find.dns %q: port must be 1-65535", e)
		}
		if h == "" {
			return nil, fmt.Errorf("kvp2p: config: find.dns %q: a name is required", e)
		}
		out = append(out, dnsEntry{spec: e, host: h, port: p})
	}
	return out, nil
}

// evResolved is one DNS answer for the loop: the peers entry names, or
// err when the lookup failed (a name that does not exist is no error: an
// empty answer).
type evResolved struct {
	entry string
	peers []string
	err   error
}

// peerIDs turns an entry's addresses into peer ids, as the members
// advertise them: the address in its canonical form (an IPv4-mapped IPv6
// address as IPv4), with the entry's port.
func (e dnsEntry) peerIDs(addrs []netip.Addr) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.JoinHostPort(a.Unmap().String(), e.port))
	}
	return out
}

// resolve asks r for e's addresses within timeout.
func (e dnsEntry) resolve(ctx context.Context, r Resolver, timeout time.Duration) evResolved {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", e.host)
	var dnsErr *net.DNSError
	if err != nil && errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return evResolved{entry: e.spec} // the name has no records: nobody
	}
	if err != nil {
		return evResolved{entry: e.spec, err: err}
	}
	return evResolved{entry: e.spec, peers: e.peerIDs(addrs)}
}

// resolveLoop is the shell's DNS goroutine: it resolves every entry at
// once, then every interval, and posts each answer, until stop closes. It
// decides nothing: the loop merges the answers (members).
func resolveLoop(r Resolver, entries []dnsEntry, every time.Duration, stop <-chan struct{}, post func(evResolved)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // a lookup in flight ends with the node
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	timeout := min(every, 5*time.Second)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, e := range entries {
			ev := e.resolve(ctx, r, timeout)
			if ctx.Err() != nil {
				return
			}
			post(ev)
		}
		t.Reset(every)
	}
}
