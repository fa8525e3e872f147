package session

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Scripted scenarios (after etcd raft's datadriven tests). Each file in
// testdata/ is a list of blocks:
//
//	directive arg=value ...
//	----
//	expected trace, one line per event
//	<blank line>
//
// The trace of a directive lists, in order, what the consumer (c) and the
// producer (p) sent, the data-path operations they asked for, and the
// results, releases and ends they published. `go test -run TestScripts
// -rewrite` rewrites the expected traces.

var rewrite = flag.Bool("rewrite", false, "rewrite the expected traces of testdata/*.txt")

func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScript(t, file) })
	}
}

type scriptBlock struct {
	line int
	pre  string // the comment lines before the directive, kept by -rewrite
	cmd  string
	want string
}

func parseScript(t *testing.T, file string) []scriptBlock {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []scriptBlock
	var pre []string
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := scriptBlock{line: i + 1, cmd: l, pre: strings.Join(pre, "\n")}
		pre = nil
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			t.Fatalf("%s:%d: directive without ----", file, i+1)
		}
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		b.want = strings.Join(want, "\n")
		out = append(out, b)
	}
	return out
}

func runScript(t *testing.T, file string) {
	blocks := parseScript(t, file)
	var pr *pair
	var buf strings.Builder
	for _, b := range blocks {
		fields := strings.Fields(b.cmd)
		args := map[string]string{}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			args[k] = v
		}
		if fields[0] == "new" {
			pr = newPair(t, scriptConfig(args))
		} else if pr == nil {
			t.Fatalf("%s:%d: first directive must be new", file, b.line)
		}
		mark := pr.mark()
		scriptDo(t, pr, fields[0], args, file, b.line)
		got := pr.traceSince(mark)
		if *rewrite {
			if b.pre != "" {
				fmt.Fprintf(&buf, "%s\n", b.pre)
			}
			fmt.Fprintf(&buf, "%s\n----\n%s\n\n", b.cmd, got)
			continue
		}
		if got != b.want {
			t.Fatalf("%s:%d: %s\n--- got:\n%s\n--- want:\n%s", file, b.line, b.cmd, got, b.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(buf.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func scriptConfig(args map[string]string) func(c, p *Config) {
	return func(c, p *Config) {
		for k, v := range args {
			cfg := c
			if strings.HasPrefix(k, "p.") {
				cfg = p
			}
			switch strings.TrimPrefix(strings.TrimPrefix(k, "p."), "c.") {
			case "fingerprint":
				cfg.Fingerprint = v
			case "seed":
				cfg.HashSeed = v
			case "block-bytes":
				n, _ := strconv.Atoi(v)
				cfg.BlockBytes = uint32(n)
			case "id":
				cfg.LocalID = v
			case "abort-ack-timeout":
				cfg.AbortAckTimeout, _ = time.ParseDuration(v)
			}
		}
		c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour // scripts pin other timers
		c.HeartbeatInterval, p.HeartbeatInterval = time.Hour, time.Hour
	}
}

// scriptKeys parses "a0,a1,b3": a letter prefix and an index.
func scriptKeys(s string) []wire.Key {
	if s == "" {
		return nil
	}
	var ks []wire.Key
	for _, name := range strings.Split(s, ",") {
		i := strings.IndexAny(name, "0123456789")
		n, _ := strconv.Atoi(name[i:])
		ks = append(ks, testkeys.Key(name[:i], n))
	}
	return ks
}

func scriptNum(args map[string]string, k string) uint64 {
	n, _ := strconv.ParseUint(args[k], 10, 64)
	return n
}

func scriptDo(t *testing.T, pr *pair, cmd string, a map[string]string, file string, line int) {
	now := pr.now
	switch cmd {
	case "new":
	case "connect":
		pr.c.s.Start(now)
		pr.p.s.Start(now)
		pr.flush()
	case "have":
		pr.p.blocks.add(scriptKeys(a["keys"])...)
	case "filling":
		for _, k := range scriptKeys(a["keys"]) {
			pr.p.blocks.pending[k] = true
		}
	case "lookup":
		for _, k := range scriptKeys(a["keys"]) {
			pr.c.s.RegisterLookup(a["req"], k)
		}
		pr.c.s.FlushLookups(now)
		pr.flush()
	case "load":
		ks := scriptKeys(a["keys"])
		j := scriptNum(a, "job")
		if err := pr.c.s.RequestBlocks(now, j, a["req"], ks, slots(int(j)*100, len(ks)), a["mode"] == "pd"); err != nil {
			pr.c.loads = append(pr.c.loads, LoadResult{Job: j, Reason: "refused: " + err.Error()})
		}
		pr.flush()
	case "store":
		ks := scriptKeys(a["keys"])
		pr.p.s.AddStoredBlocks(now, a["req"], ks, slots(int(scriptNum(a, "job"))*100, len(ks)), scriptNum(a, "job"))
		pr.flush()
	case "finish":
		if a["side"] == "p" {
			pr.p.s.FinishProducer(now, a["req"])
		} else {
			pr.c.s.FinishConsumer(now, a["req"])
		}
		pr.flush()
	case "send-end":
		pr.sendEnd(scriptNum(a, "job"), a["ok"] == "true", scriptNum(a, "bytes"))
	case "data-end":
		pr.dataEnd(scriptNum(a, "job"), a["ok"] == "true", scriptNum(a, "bytes"))
	case "conn-failed":
		pr.c.s.ConnFailed(now)
		pr.p.s.ConnFailed(now)
		pr.flush()
	case "data-closed": // the connections of every ended side are closed
		for _, sd := range []*side{pr.c, pr.p} {
			if sd.ended != health.CauseNone {
				sd.s.DataClosed(now)
			}
		}
		pr.flush()
	case "advance":
		d, err := time.ParseDuration(a["by"])
		if err != nil {
			t.Fatalf("%s:%d: %v", file, line, err)
		}
		pr.advance(d)
	default:
		t.Fatalf("%s:%d: unknown directive %q", file, line, cmd)
	}
}

type traceMark struct{ cs, ps, cd, pd, cl, ps2, cr int }

func (pr *pair) mark() traceMark {
	return traceMark{len(pr.c.sent), len(pr.p.sent), len(pr.c.data), len(pr.p.data), len(pr.c.loads), len(pr.p.stores), len(pr.c.releases)}
}

func (pr *pair) traceSince(m traceMark) string {
	var out []string
	for _, x := range []struct {
		who  string
		msgs []wire.Message
	}{{"c", pr.c.sent[m.cs:]}, {"p", pr.p.sent[m.ps:]}} {
		for _, msg := range x.msgs {
			out = append(out, x.who+" sends "+describe(msg))
		}
	}
	for _, x := range []struct {
		who string
		ops []DataOp
	}{{"c", pr.c.data[m.cd:]}, {"p", pr.p.data[m.pd:]}} {
		for _, op := range x.ops {
			out = append(out, x.who+" data "+describeOp(op))
		}
	}
	for _, r := range pr.c.loads[m.cl:] {
		l := fmt.Sprintf("c load job=%d ok=%v bytes=%d", r.Job, r.OK, r.Bytes)
		if r.Reason != "" {
			l += " (" + r.Reason + ")"
		}
		out = append(out, l)
	}
	for _, r := range pr.p.stores[m.ps2:] {
		out = append(out, fmt.Sprintf("p store job=%d ok=%v", r.Job, r.OK))
	}
	for _, j := range pr.c.releases[m.cr:] {
		out = append(out, fmt.Sprintf("c release job=%d", j))
	}
	for _, x := range []struct {
		who string
		sd  *side
	}{{"c", pr.c}, {"p", pr.p}} {
		if x.sd.ended != health.CauseNone && !x.sd.reportedEnd {
			x.sd.reportedEnd = true
			out = append(out, x.who+" ended "+x.sd.ended.String())
		}
	}
	out = append(out, fmt.Sprintf("state: pins=%d busy=%v/%v", pr.p.blocks.pinned(), pr.c.s.Busy(), pr.p.s.Busy()))
	return strings.Join(out, "\n")
}

func describe(m wire.Message) string {
	switch m := m.(type) {
	case *wire.Hello:
		return "Hello " + m.PeerID
	case *wire.HelloAck:
		return "HelloAck"
	case *wire.Lookup:
		return fmt.Sprintf("Lookup %s round=%d keys=%d", m.ReqID, m.Round, len(m.Keys))
	case *wire.LookupResp:
		return fmt.Sprintf("LookupResp %s round=%d hits=%v", m.ReqID, m.Round, m.Hits)
	case *wire.Fetch:
		return fmt.Sprintf("Fetch %s round=%d job=%d keys=%d", m.ReqID, m.Round, m.Job, len(m.Keys))
	case *wire.TransferDone:
		return fmt.Sprintf("TransferDone %s round=%d job=%d ok=%v", m.ReqID, m.Round, m.Job, m.Success)
	case *wire.Abort:
		return fmt.Sprintf("Abort %s round=%d job=%d", m.ReqID, m.Round, m.Job)
	case *wire.AbortAck:
		return fmt.Sprintf("AbortAck %s round=%d job=%d", m.ReqID, m.Round, m.Job)
	case *wire.Goodbye:
		return fmt.Sprintf("Goodbye reason=%d", m.Reason)
	}
	return m.Type().String()
}

func describeOp(op DataOp) string {
	switch op.Kind {
	case OpExpect:
		return fmt.Sprintf("expect job=%d slots=%d", op.Job, len(op.Slots))
	case OpOpen:
		return fmt.Sprintf("open job=%d", op.Job)
	case OpSend:
		return fmt.Sprintf("send job=%d blocks=%d last=%v", op.Job, len(op.Blocks), op.Last)
	case OpCancel:
		return fmt.Sprintf("cancel job=%d", op.Job)
	}
	return fmt.Sprintf("op %d job=%d", op.Kind, op.Job)
}
