package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Names of what the lab makes; Clean finds leftovers by them.
const (
	nsPrefix = "kvp2plab-"
	bridgeNS = nsPrefix + "br"
	// StateDir holds the lock, configs, sockets and logs of the lab.
	StateDir = "/run/kvp2p-lab"
	// RegionDir holds the engines' region files (shared memory).
	RegionDir = "/dev/shm/kvp2p-lab"
	// Subnet is the lab's private range; it exists only in the lab's namespaces.
	Subnet = "10.200.0.0/16"
)

// cmdTimeout bounds one ip/nft/tc/ss call: they answer in milliseconds,
// and a hung one must not hang the lab.
const cmdTimeout = 10 * time.Second

// run runs a command and returns its error with its output, so that a
// failure says what the kernel refused.
func runCmd(name string, args ...string) error {
	_, err := output(nil, name, args...)
	return err
}

func output(stdin []byte, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Check reports why the lab cannot run here: not root, or a tool missing.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root (network namespaces, nftables, tc): run it with sudo")
	}
	for _, tool := range []string{"ip", "nft", "tc", "ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the lab needs %q on PATH (apt-get install -y iproute2 nftables): %v", tool, err)
		}
	}
	if err := runCmd("ip", "netns", "list"); err != nil {
		return fmt.Errorf("ip netns does not work here: %v", err)
	}
	return nil
}

// Lock is the lab's lock: one lab at a time on a machine.
type Lock struct{ f *os.File }

// Acquire takes the lock, or says which live lab holds it; holding it, it
// removes whatever a lab that died left behind.
func Acquire() (*Lock, error) {
	if err := os.MkdirAll(StateDir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(StateDir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another kvp2p lab holds %s (pid %s): wait for it, or stop it", path, strings.TrimSpace(string(b)))
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err := Clean(); err != nil {
		f.Close()
		return nil, fmt.Errorf("removing a previous lab's leftovers: %w", err)
	}
	return &Lock{f: f}, nil
}

// Release lets another lab run.
func (l *Lock) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// Namespaces lists the lab's network namespaces.
func Namespaces() ([]string, error) {
	out, err := output(nil, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// Clean removes everything a lab makes: the processes in its namespaces
// (SIGKILL, then SIGCONT in case one is stopped), the namespaces (and with
// them the veths and the bridge), the state and region files. It touches
// nothing else: only namespaces named kvp2plab-*, only processes inside
// them. Call it holding the lock, or from `kvp2p lab --clean`.
func Clean() error {
	names, err := Namespaces()
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range names {
		killNS(ns)
	}
	for _, ns := range names {
		if err := runCmd("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	entries, _ := os.ReadDir(StateDir)
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, os.RemoveAll(filepath.Join(StateDir, e.Name())))
		}
	}
	errs = append(errs, os.RemoveAll(RegionDir))
	return errors.Join(errs...)
}

// killNS kills every process in namespace ns and waits (briefly) for the
// kernel to reap them, so that the namespace can go.
func killNS(ns string) {
	for range 50 {
		out, err := output(nil, "ip", "netns", "pids", ns)
		if err != nil || strings.TrimSpace(out) == "" {
			return
		}
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Hosts are the lab's network hosts: scenario host -> namespace and
// address.
type Hosts struct {
	ns   map[string]string // scenario host -> namespace
	addr map[string]string // scenario host -> 10.200.0.x
	list []string          // scenario hosts, in creation order
}

// NS is the namespace of scenario host h.
func (h *Hosts) NS(host string) string { return h.ns[host] }

// Addr is the lab address of scenario host h.
func (h *Hosts) Addr(host string) string { return h.addr[host] }

// MakeHosts creates the bridge namespace and one namespace per host.
// On error what was made is left for Clean.
func MakeHosts(hosts []string) (*Hosts, error) {
	if len(hosts) > 250 {
		return nil, fmt.Errorf("%d hosts: the lab makes at most 250", len(hosts))
	}
	h := &Hosts{ns: map[string]string{}, addr: map[string]string{}}
	steps := [][]string{
		{"ip", "netns", "add", bridgeNS},
		{"ip", "-n", bridgeNS, "link", "set", "lo", "up"},
		{"ip", "-n", bridgeNS, "link", "add", "name", "br0", "type", "bridge"},
		{"ip", "-n", bridgeNS, "link", "set", "br0", "up"},
	}
	for _, s := range steps {
		if err := runCmd(s[0], s[1:]...); err != nil {
			return nil, err
		}
	}
	for i, host := range hosts {
		ns := fmt.Sprintf("%sh%d", nsPrefix, i)
		veth := fmt.Sprintf("vh%d", i)
		addr := fmt.Sprintf("10.200.0.%d", i+1)
		steps := [][]string{
			{"ip", "netns", "add", ns},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			// Both ends are made inside the lab's namespaces: nothing
			// appears in the machine's own, even for an instant.
			{"ip", "-n", bridgeNS, "link", "add", "name", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"ip", "-n", bridgeNS, "link", "set", veth, "master", "br0", "up"},
			{"ip", "-n", ns, "addr", "add", addr + "/16", "dev", "eth0"},
			{"ip", "-n", ns, "link", "set", "eth0", "up"},
		}
		for _, s := range steps {
			if err := runCmd(s[0], s[1:]...); err != nil {
				return nil, err
			}
		}
		h.ns[host], h.addr[host] = ns, addr
		h.list = append(h.list, host)
	}
	return h, nil
}
