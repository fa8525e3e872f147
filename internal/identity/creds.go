package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config turns on mutual TLS (TLS 1.3) on every control and data
// connection. Either all three files are set or none; without them the
// node speaks plain TCP (and checks claimed hosts against source
// addresses instead, see Config.TrustClaimedHost).
//
// A peer's identity is its certificate, one per rank: the certificate must
// name the whole peer id a Hello or a DataAttach claims, port included, as
// a URI SAN (kvp2p://host:port, or a SPIFFE id whose path ends in
// /kvp2p/host/port), and name its host as a TLS client checks a server (IP
// or DNS SAN). A certificate for the host alone speaks for no rank: ranks
// share hosts (many engine ranks per pod), and a sibling rank's
// certificate must not claim another rank's id (issue 25 #5). The dialer
// checks the server it reached the same way. A data connection must carry
// the same identity as the control connection it attaches to.
//
// Data chunks keep their CRC32C under TLS, although the AEAD already
// guards the wire: the CRC is taken from the source slot before the send
// and checked in the destination slot after the copy out of TLS's buffer,
// so it also catches what TLS cannot see (a slot rewritten while it was
// being sent, a bad copy on either side, and corruption at rest where the
// producer's sums were taken when the block was stored). Both sums cost
// about a tenth of the TLS path's CPU (profile of BenchmarkLoadTLS, about
// 0.12 CPU-s per GB for both ends); dropping them under TLS would also
// need both ends to agree on the wire, and would lift TLS/plain by about
// 0.05, far from closing the gap to plain.
//
// What TLS costs (kvp2p bench --tls prints it): AES-128-GCM, the suite
// TLS 1.3 negotiates on AES hardware (Go offers no choice; AES-256-GCM
// costs about the same here, and a TLS stream with ChaCha20-Poly1305 took
// 1.4-1.5 times the CPU of one with AES-128-GCM), seals and opens at
// about 3.7 GB/s per core in Go's AES-NI code (Go 1.26 has no VAES
// version), which is 0.4-0.55 CPU-s per GB moved with both ends on one
// machine: about as much as the whole plain path. So on a machine whose
// CPU is the limit TLS/plain cannot beat plain/(plain + AEAD), about
// 0.55-0.6 on the project's 2-core test machine. Between two hosts each
// end pays its own half: the receiver (decrypt, read, copy) managed about
// 1.6 GB/s per core in a loopback profile, more than a 10 GbE link
// carries. The record layer around the AEAD is kept thin: a chunk's
// records reach the socket in one write (coalesce.go).
type Config struct {
	CertFile string `yaml:"cert_file"` // PEM certificate chain of this node
	KeyFile  string `yaml:"key_file"`  // PEM private key of CertFile
	CAFile   string `yaml:"ca_file"`   // PEM CA bundle peers' certificates must chain to
	// AllowPeers, if not empty, admits only certificates with a SAN (DNS
	// name, IP or URI, e.g. a SPIFFE id) matching one of these
	// comma-separated patterns (path.Match syntax:
	// "*.pod.cluster.local,spiffe://prod/kvp2p/*").
	AllowPeers string `yaml:"allow_peers"`
}

// Enabled reports whether TLS is configured.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

func (c Config) Validate() error {
	if !c.Enabled() {
		if c.AllowPeers != "" {
			return errors.New("kvp2p: config: tls.allow_peers needs tls.cert_file, key_file and ca_file")
		}
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return errors.New("kvp2p: config: tls: cert_file, key_file and ca_file are all required")
	}
	for _, p := range c.patterns() {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("kvp2p: config: tls.allow_peers %q: %v", p, err)
		}
	}
	return nil
}

// patterns splits AllowPeers.
func (c Config) patterns() []string {
	var ps []string
	for _, p := range strings.Split(c.AllowPeers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			ps = append(ps, p)
		}
	}
	return ps
}

// Creds holds the current certificate and CA pool; they are reloaded
// from the files on Reload (SIGHUP) or when a file's modification time or
// size changes (checked at most once per reloadCheck, on new connections).
// Safe for concurrent use: the accept and dial goroutines read it.
type Creds struct {
	cfg   Config
	allow []string // cfg.patterns()
	cur   atomic.Pointer[tlsMaterial]

	mu      sync.Mutex // serializes reloads; never held across a handshake
	checked time.Time
	stamps  [3]fileStamp
}

type tlsMaterial struct {
	cert tls.Certificate
	pool *x509.CertPool
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// reloadCheck bounds how often the files are stat'ed.
const reloadCheck = time.Second

func NewCreds(cfg Config) (*Creds, error) {
	c := &Creds{cfg: cfg, allow: cfg.patterns()}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Creds) files() [3]string { return [3]string{c.cfg.CertFile, c.cfg.KeyFile, c.cfg.CAFile} }

// Reload reads the files again. On error the current material stays.
func (c *Creds) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reloadLocked()
}

func (c *Creds) reloadLocked() error {
	var stamps [3]fileStamp
	for i, f := range c.files() {
		st, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("kvp2p: tls: %v", err)
		}
		stamps[i] = fileStamp{st.ModTime(), st.Size()}
	}
	cert, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("kvp2p: tls: certificate: %v", err)
	}
	ca, err := os.ReadFile(c.cfg.CAFile)
	if err != nil {
		return fmt.Errorf("kvp2p: tls: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("kvp2p: tls: ca_file %s: no PEM certificate", c.cfg.CAFile)
	}
	c.cur.Store(&tlsMaterial{cert: cert, pool: pool})
	c.stamps = stamps
	return nil
}

// MaybeReload reloads if a file changed since the last load; errors keep
// the old material (a half-written file is retried on the next check).
func (c *Creds) MaybeReload(now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.checked) < reloadCheck {
		return nil
	}
	c.checked = now
	for i, f := range c.files() {
		st, err := os.Stat(f)
		if err != nil {
			return nil // being replaced; the old material serves meanwhile
		}
		if (fileStamp{st.ModTime(), st.Size()}) != c.stamps[i] {
			return c.reloadLocked()
		}
	}
	return nil
}

// ServerConfig is the listener side: a client certificate is required.
func (c *Creds) ServerConfig() *tls.Config {
	m := c.cur.Load()
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{m.cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        m.pool,
		VerifyConnection: c.allowed,
		// Bulk transfers: full 16 KiB records from the first byte (dynamic
		// sizing restarts with small records after every idle second).
		DynamicRecordSizingDisabled: true,
	}
}

// ClientConfig dials peerID: the server's certificate must name its host
// and the rank itself (NamesRank).
func (c *Creds) ClientConfig(peerID string) *tls.Config {
	m := c.cur.Load()
	host, _, _ := net.SplitHostPort(peerID)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.cert},
		RootCAs:      m.pool,
		ServerName:   host,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := c.allowed(cs); err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 || !NamesRank(cs.PeerCertificates[0], peerID) {
				return fmt.Errorf("kvp2p: tls: the certificate of %s names no rank %s (want URI SAN %s)", peerID, peerID, RankURI(peerID))
			}
			return nil
		},
		// As ServerConfig.
		DynamicRecordSizingDisabled: true,
	}
}

// allowed applies the allow-list to the verified peer certificate.
func (c *Creds) allowed(cs tls.ConnectionState) error {
	if len(c.allow) == 0 {
		return nil
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("kvp2p: tls: no peer certificate")
	}
	for _, san := range SANs(cs.PeerCertificates[0]) {
		for _, p := range c.allow {
			if ok, _ := path.Match(p, san); ok {
				return nil
			}
		}
	}
	return fmt.Errorf("kvp2p: tls: peer certificate %v not in allow_peers", SANs(cs.PeerCertificates[0]))
}

// sans lists a certificate's DNS, IP and URI SANs.
func SANs(c *x509.Certificate) []string {
	var out []string
	out = append(out, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

// Peer is who a connection proved to be: its certificate's SANs
// (sorted, joined), empty on plain TCP. A renewed certificate for the same
// names is the same identity, so rotation does not split a session.
// Peer is what a verified certificate says of the peer: its SANs, sorted
// and joined; "" for plain TCP. A data connection must carry the same
// Peer as the control connection it attaches to.
type Peer string

// Of is the Peer a TLS handshake proved.

func Of(cs tls.ConnectionState) Peer {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	s := SANs(cs.PeerCertificates[0])
	slices.Sort(s)
	return Peer(strings.Join(s, ","))
}

// RankURI is the URI SAN that names peer id peerID in a rank's
// certificate: kvp2p://host:port.
func RankURI(peerID string) string { return "kvp2p://" + peerID }

// NamesRank reports whether cert names the rank peerID, port included: a
// URI SAN kvp2p://host:port equal to the peer id (host compared without
// case), or a SPIFFE id (any trust domain) whose path ends in
// /kvp2p/host/port.
func NamesRank(cert *x509.Certificate, peerID string) bool {
	host, port, err := net.SplitHostPort(peerID)
	if err != nil {
		return false
	}
	for _, u := range cert.URIs {
		switch {
		case u.Scheme == "kvp2p" && u.Path == "" && u.RawQuery == "" && u.User == nil:
			h, p, err := net.SplitHostPort(u.Host)
			if err == nil && p == port && strings.EqualFold(h, host) {
				return true
			}
		case u.Scheme == "spiffe":
			if strings.HasSuffix(strings.ToLower(u.Path), "/kvp2p/"+strings.ToLower(host)+"/"+port) {
				return true
			}
		}
	}
	return false
}

// CheckClaim reports why a connection may not claim peerID: with TLS, the
// certificate must name its host and the rank (NamesRank); without, the
// host must be the source address unless trust is set (NAT, or the demo's
// labelled hosts).
func CheckClaim(ctx context.Context, nc net.Conn, peerID string, trust bool) error {
	host, _, err := net.SplitHostPort(peerID)
	if err != nil {
		return fmt.Errorf("peer id %q: %v", peerID, err)
	}
	if tc, ok := nc.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no peer certificate")
		}
		if err := cs.PeerCertificates[0].VerifyHostname(host); err != nil {
			return fmt.Errorf("claims %q: %v", peerID, err)
		}
		if !NamesRank(cs.PeerCertificates[0], peerID) {
			return fmt.Errorf("claims %q: the certificate %v names no such rank (want URI SAN %s)",
				peerID, SANs(cs.PeerCertificates[0]), RankURI(peerID))
		}
		return nil
	}
	if trust {
		return nil
	}
	src, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return fmt.Errorf("source %v: %v", nc.RemoteAddr(), err)
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.Equal(net.ParseIP(src)) {
			return nil
		}
		return fmt.Errorf("claims host %s from source %s", host, src)
	}
	// A name: it must resolve to the source (done in the connection's own
	// goroutine, never the loop's).
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return fmt.Errorf("claims host %s: %v", host, err)
	}
	for _, a := range addrs {
		if net.ParseIP(a).Equal(net.ParseIP(src)) {
			return nil
		}
	}
	return fmt.Errorf("claims host %s (%v) from source %s", host, addrs, src)
}

// OwnCert parses the node's current certificate, for the start-up check
// that it names the node's own rank.
func (c *Creds) OwnCert() (*x509.Certificate, error) {
	return x509.ParseCertificate(c.cur.Load().cert.Certificate[0])
}
