package lab

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// proc is one `kvp2p serve` process in a host's namespace.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process is reaped
}

// startServe runs bin serve --config cfg inside namespace ns, its output
// appended to logPath. It runs in a process group of its own (a Ctrl-C
// at the terminal reaches the lab only, which stops it in order). No
// parent-death signal: --keep leaves it running after the lab exits; if
// the lab is killed outright, the next lab's Clean kills what it left.
func startServe(bin, ns, cfg, logPath, logLevel string) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "serve", "--config", cfg, "--log-level", logLevel)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kvp2p serve in %s: %w", ns, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) signal(sig syscall.Signal) error { return syscall.Kill(p.pid(), sig) }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill is SIGKILL, and the wait for the kernel to reap it.
func (p *proc) kill() {
	_ = p.signal(syscall.SIGKILL)
	_ = p.signal(syscall.SIGCONT) // a stopped process dies only when continued on some kernels
	<-p.done
}

// stop is SIGTERM (a graceful stop), then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}
