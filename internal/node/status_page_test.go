package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// chromium finds Debian's headless browser. Without one the page test
// skips, unless KVP2P_REQUIRE_CHROMIUM is set (CI): then it fails.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("KVP2P_REQUIRE_CHROMIUM") != "" {
		t.Fatal("KVP2P_REQUIRE_CHROMIUM is set and no chromium is on PATH (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium; CI sets KVP2P_REQUIRE_CHROMIUM=1)")
	return ""
}

// runChromium runs headless Chromium with args and returns its stdout. Its
// whole process group is killed if it overruns.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--no-first-run", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// TestStatusPageInChromium loads the status page of a consumer watching a
// partial pod failure (pod-a: rank 0 crashed, rank 1's data path silent)
// while a load to a healthy pod-b waits, in headless Chromium, and checks
// what it shows against the node's snapshot. The screenshot is saved in the
// test's temp dir (and copied to $KVP2P_PAGE_SCREENSHOT when set).
func TestStatusPageInChromium(t *testing.T) {
	bin := chromium(t)
	pod := func(d string) func(*Config) { return func(cfg *Config) { cfg.FailureDomain = d } }
	r0 := startTN(t, nodeOpt{mut: pod("pod-a")})
	r1 := startTN(t, nodeOpt{wrap: true, mut: pod("pod-a")})
	b0 := startTN(t, nodeOpt{mut: pod("pod-b")})
	c := startTN(t, nodeOpt{mut: pod("consumer")})
	addr := serveStatus(t, c.Node)
	for _, p := range []*tnode{r0, r1, b0} {
		warm(t, c, p)
	}
	// Loads wait on their producers (nothing stored yet): one to the rank
	// that will go silent, one to the healthy pod.
	c.m.NewRequest("req-a", nodetest.PDParams(t, "kv-a", r1.PeerID()))
	c.m.NewRequest("req-b", nodetest.PDParams(t, "kv-b", b0.PeerID()))
	for _, id := range []string{"req-a", "req-b"} {
		if v := waitVerdict(t, c.m, id, nodetest.Key("page", 0)); v != Hit {
			t.Fatalf("%s: lookup %v", id, v)
		}
	}
	la, _ := c.m.SubmitLoad("req-a", nodetest.Keys("page-a", 4))
	lb, _ := c.m.SubmitLoad("req-b", nodetest.Keys("page-b", 8))
	r1.fl.blackhole(true)
	r0.Close()
	if r := waitResult(t, c.m, la, 5*time.Second); r.OK {
		t.Fatal("load over a silent data path succeeded")
	}
	s := waitSnapshot(t, addr, func(s *metrics.Snapshot) bool {
		return s.Counters.ProbesFailed == 1 && len(s.Loads) == 1 && s.Hists.TimeToFallback.Count == 1
	})

	dom := runChromium(t, bin, "--virtual-time-budget=1000", "--dump-dom", "http://"+addr+"/")
	for _, d := range s.Domains {
		if !strings.Contains(dom, `data-domain="`+d.Name+`" data-state="`+d.State+`"`) {
			t.Errorf("page does not show domain %s as %s", d.Name, d.State)
		}
		for _, p := range d.Peers {
			if !strings.Contains(dom, `data-peer="`+p.ID+`"`) {
				t.Errorf("page does not show peer %s", p.ID)
			}
		}
	}
	if !strings.Contains(dom, `data-domain="pod-a" data-state="suspect"`) || !strings.Contains(dom, `data-domain="pod-b" data-state="ok"`) {
		t.Errorf("pod-a should be suspect and pod-b ok on the page")
	}
	if !regexp.MustCompile(`data-job="` + itoa(lb) + `"><td class="num">` + itoa(lb) + `</td><td>req-b</td><td>` + regexp.QuoteMeta(b0.PeerID()) + `</td><td>pod-b</td>`).MatchString(dom) {
		t.Errorf("page does not show load %d to %s in flight", lb, b0.PeerID())
	}
	if want := fmt.Sprintf("Time to fallback (%d fallbacks", s.Hists.Fallbacks().Count); !strings.Contains(dom, want) {
		t.Errorf("page does not show the fallback in its histogram")
	}
	if !regexp.MustCompile(`<td>progress-stall</td><td class="num">1</td>`).MatchString(dom) ||
		!regexp.MustCompile(`<td>conn-reset</td><td class="num">1</td>`).MatchString(dom) {
		t.Errorf("page does not show the session ends by cause")
	}
	if t.Failed() {
		t.Logf("page:\n%s", dom)
	}

	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, bin, "--window-size=1280,900", "--virtual-time-budget=1000", "--screenshot="+shot, "http://"+addr+"/")
	st, err := os.Stat(shot)
	if err != nil || st.Size() < 10<<10 {
		t.Fatalf("screenshot %s: %v (size %v)", shot, err, st)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, st.Size())
	if dst := os.Getenv("KVP2P_PAGE_SCREENSHOT"); dst != "" {
		b, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(dst, b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
