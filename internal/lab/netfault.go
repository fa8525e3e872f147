package lab

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// hostNet is the kernel side of one host's faults: its nftables table and
// its eth0 qdiscs. Every change rewrites the fault chains (or the qdisc
// tree) from the state, so that a heal can never leave a stray rule.
//
// Data connections are told from control connections by their first
// frame: a data connection starts with DataAttach, a control connection
// with Hello. A rule on the host's input hook marks a connection whose
// first payload to the rank's port starts with DataAttach's version and
// type bytes (nftables' inner-header payload match, @ih); conntrack keeps
// the mark for both directions of that connection, so blackhole-data
// drops exactly the rank's data connections, old and new, and nothing
// else.
type hostNet struct {
	ns    string
	ports []int // every rank's port on the host
	black map[int]bool
	data  map[int]bool  // blackhole-data
	slow  map[int]int64 // bytes per second
	built map[int]int64 // what the qdiscs were last built from
}

// slowDirty reports whether slow changed since the qdiscs were built.
func (h *hostNet) slowDirty() bool { return !maps.Equal(h.slow, h.built) }

func newHostNet(ns string, ports []int) (*hostNet, error) {
	h := &hostNet{ns: ns, ports: slices.Clone(ports), black: map[int]bool{}, data: map[int]bool{}, slow: map[int]int64{}}
	return h, h.init()
}

// dataTag is the version and type bytes of a DataAttach frame, after its
// 4-byte length: what the marking rule matches.
func dataTag() (uint16, error) {
	b, err := wire.Append(nil, &wire.DataAttach{})
	if err != nil || len(b) < 6 {
		return 0, fmt.Errorf("encoding a DataAttach: %v", err)
	}
	return uint16(b[4])<<8 | uint16(b[5]), nil
}

func (h *hostNet) init() error {
	tag, err := dataTag()
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("table inet kvp2plab {\n chain fin { }\n chain fout { }\n")
	b.WriteString(" chain in { type filter hook input priority 0; policy accept;\n")
	for _, p := range h.ports {
		fmt.Fprintf(&b, "  tcp dport %d @ih,32,16 0x%04x ct mark set %d\n", p, tag, p)
	}
	b.WriteString("  jump fin\n }\n chain out { type filter hook output priority 0; policy accept; jump fout; }\n}\n")
	_, err = output([]byte(b.String()), "ip", "netns", "exec", h.ns, "nft", "-f", "-")
	return err
}

// apply rewrites the fault chains from black and data.
func (h *hostNet) apply() error {
	var b strings.Builder
	b.WriteString("flush chain inet kvp2plab fin\nflush chain inet kvp2plab fout\n")
	for _, p := range sortedKeys(h.black) {
		fmt.Fprintf(&b, "add rule inet kvp2plab fin tcp dport %d drop\n", p)
		fmt.Fprintf(&b, "add rule inet kvp2plab fout tcp sport %d drop\n", p)
	}
	for _, p := range sortedKeys(h.data) {
		fmt.Fprintf(&b, "add rule inet kvp2plab fin tcp dport %d ct mark %d drop\n", p, p)
		fmt.Fprintf(&b, "add rule inet kvp2plab fout tcp sport %d ct mark %d drop\n", p, p)
	}
	_, err := output([]byte(b.String()), "ip", "netns", "exec", h.ns, "nft", "-f", "-")
	return err
}

// applySlow rebuilds eth0's qdiscs from slow: an htb root whose default
// class is unlimited, and per slow rank a class with a tbf qdisc at its
// rate, chosen by a u32 filter on the rank's source port. tbf's queue
// holds up to a second of data; behind it the kernel's socket send
// buffers fill and the rank's writes block, as on a slow NIC.
func (h *hostNet) applySlow() error {
	_ = runCmd("ip", "netns", "exec", h.ns, "tc", "qdisc", "del", "dev", "eth0", "root") // absent at first: fine
	h.built = maps.Clone(h.slow)
	if len(h.slow) == 0 {
		return nil
	}
	tc := func(args ...string) error {
		return runCmd("ip", append([]string{"netns", "exec", h.ns, "tc"}, args...)...)
	}
	if err := tc("qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1", "r2q", "100000"); err != nil {
		return err
	}
	if err := tc("class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit"); err != nil {
		return err
	}
	for i, p := range sortedKeys(h.slow) {
		bps := h.slow[p]
		cls := fmt.Sprintf("1:%x", 0x10+i)
		// burst: at least a 64 KiB GSO segment, or tbf drops it forever.
		burst := max(bps/50, 128<<10)
		steps := [][]string{
			{"class", "add", "dev", "eth0", "parent", "1:", "classid", cls, "htb", "rate", "100gbit"},
			{"qdisc", "add", "dev", "eth0", "parent", cls, "handle", fmt.Sprintf("%x:", 0x10+i), "tbf",
				"rate", fmt.Sprintf("%dbps", bps), "burst", fmt.Sprint(burst), "latency", "1s"},
			{"filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
				"match", "ip", "sport", fmt.Sprint(p), "0xffff", "flowid", cls},
		}
		for _, s := range steps {
			if err := tc(s...); err != nil {
				return err
			}
		}
	}
	return nil
}

// resetConns resets every TCP connection of the rank's port on its host
// (ss -K: the kernel aborts each socket and sends the peer a RST).
func resetConns(ns string, port int) error {
	return runCmd("ip", "netns", "exec", ns, "ss", "-K", "-t", fmt.Sprintf("( sport = :%d )", port))
}

func sortedKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
