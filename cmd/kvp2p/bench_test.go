package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p/internal/bench"
)

// TestBenchOutput runs bench with tiny sizes and checks the shape of its
// table and of its JSON, not the numbers.
func TestBenchOutput(t *testing.T) {
	args := []string{"bench", "--bytes", "256KiB", "--block-bytes", "65536", "--runs", "2", "--lookups", "10", "--fanin", "2", "--tls"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &errb)
	}
	num := `[0-9]+(\.[0-9]+)?`
	for _, re := range []string{
		`(?m)^kvp2p bench: 256 KiB per load in 4 blocks of 65536 bytes, 127\.0\.0\.1, 2 interleaved runs$`,
		`(?m)^run +kvp2p_MB/s +raw_MB/s +kvp2p/raw +lookup_p50_us +lookups/s$`,
		`(?m)^1 +` + num + ` +` + num + ` +` + num + ` +` + num + ` +` + num + `$`,
		`(?m)^2 +` + num + ` +` + num + ` +` + num + ` +` + num + ` +` + num + `$`,
		`(?m)^median +` + num + ` +` + num + ` +` + num + ` +` + num + ` +` + num + `$`,
		`(?m)^load: +kvp2p ` + num + ` MB/s, raw TCP ` + num + ` MB/s, kvp2p/raw ` + num + ` `,
		`(?m)^lookup: p50 ` + num + ` µs, p99 ` + num + ` µs round trip, ` + num + ` lookups/s`,
		`(?m)^ping: +raw TCP 64-byte ping-pong p50 ` + num + ` µs, p99 ` + num + ` µs; lookup/ping p50 ` + num + `x, p99 ` + num + `x$`,
		`(?m)^cpu: +kvp2p ` + num + ` CPU-s/GB, raw TCP ` + num + ` CPU-s/GB `,
		`(?m)^fan-in: 2 sources into one consumer, 256 KiB in all: kvp2p ` + num + ` MB/s, 2 raw TCP streams ` + num + ` MB/s, kvp2p/raw ` + num + ` \(median; runs ` + num + ` ` + num + `\)$`,
		`(?m)^fan-in cpu: kvp2p ` + num + ` CPU-s/GB, raw TCP ` + num + ` CPU-s/GB$`,
		`(?m)^tls: +kvp2p over mutual TLS ` + num + ` MB/s, TLS/plain ` + num + ` \(median; runs ` + num + ` ` + num + `\)$`,
		`(?m)^tls cpu: ` + num + ` CPU-s/GB \(plain ` + num + `, plain/TLS ` + num + `\); AES-128-GCM seal\+open alone ` + num + ` CPU-s/GB, so TLS/plain <= ` + num + ` `,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", re, &out)
		}
	}

	out.Reset()
	if code := run(context.Background(), append(args, "--json"), &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d; stderr:\n%s", code, &errb)
	}
	var rep bench.Report
	dec := json.NewDecoder(strings.NewReader(out.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, &out)
	}
	if dec.More() {
		t.Fatalf("--json printed more than one object:\n%s", &out)
	}
	if rep.Bytes != 256<<10 || rep.BlockBytes != 65536 || rep.Runs != 2 || len(rep.PerRun) != 2 {
		t.Fatalf("--json header fields: %+v", rep)
	}
	for name, v := range map[string]float64{
		"kvp2p_mb_s": rep.KVP2PMBps, "raw_mb_s": rep.RawMBps, "ratio": rep.Ratio,
		"lookup_p50_us": rep.LookupP50us, "lookup_p99_us": rep.LookupP99us, "lookups_per_s": rep.LookupsPerS,
		"ping_p50_us": rep.PingP50us, "ping_p99_us": rep.PingP99us,
		"lookup_per_ping_p50": rep.LookupPerPing, "lookup_per_ping_p99": rep.LookupPerPing9,
		"kvp2p_cpu_s_per_gb": rep.KVP2PCPUsPerGB, "raw_cpu_s_per_gb": rep.RawCPUsPerGB,
		"fanin_mb_s": rep.FanInMBps, "fanin_raw_mb_s": rep.FanInRawMBps, "fanin_ratio": rep.FanInRatio,
		"fanin_cpu_s_per_gb": rep.FanInCPUsPerGB, "fanin_raw_cpu_s_per_gb": rep.FanInRawCPU,
		"tls_mb_s": rep.TLSMBps, "tls_ratio": rep.TLSRatio, "tls_cpu_s_per_gb": rep.TLSCPUsPerGB,
		"aead_cpu_s_per_gb": rep.AEADCPUsPerGB, "tls_ceiling": rep.TLSCeiling,
	} {
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
}

// TestBenchFlags: bad flags exit 2 with a message naming the flag.
func TestBenchFlags(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--bytes", "lots"}, `invalid value "lots" for flag -bytes`},
		{[]string{"--bytes", "1KiB"}, "kvp2p bench: --bytes 1024: want at least one block"},
		{[]string{"--block-bytes", "0"}, "kvp2p bench: --block-bytes 0"},
		{[]string{"--runs", "0"}, "kvp2p bench: --runs 0"},
		{[]string{"--fanin", "-1"}, "kvp2p bench: --fanin -1"},
		{[]string{"--lookup-rate", "-5"}, "kvp2p bench: --lookup-rate -5"},
		{[]string{"--bytes", "512KiB", "--fanin", "3"}, "kvp2p bench: --fanin 3: --bytes holds fewer blocks than sources"},
		{[]string{"now"}, `kvp2p bench: unexpected argument "now"`},
	} {
		var errb bytes.Buffer
		if code := run(context.Background(), append([]string{"bench"}, tt.args...), &bytes.Buffer{}, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", tt.args, code)
		}
		if !strings.Contains(errb.String(), tt.stderr) {
			t.Errorf("%v: stderr lacks %q:\n%s", tt.args, tt.stderr, &errb)
		}
	}
	if n, err := bench.ParseSize("256MiB"); err != nil || n != 256<<20 {
		t.Errorf("bench.ParseSize(256MiB) = %d, %v", n, err)
	}
	if n, err := bench.ParseSize("64MB"); err != nil || n != 64e6 {
		t.Errorf("bench.ParseSize(64MB) = %d, %v", n, err)
	}
}

// TestBenchFleetOutput runs a tiny fleet bench and checks the shape of its
// curve, and that every request it offered was answered.
func TestBenchFleetOutput(t *testing.T) {
	args := []string{"bench", "--fleet", "--sources", "2", "--blocks", "2", "--block-bytes", "65536", "--rates", "20,40", "--duration", "300ms"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &errb)
	}
	num := `[0-9]+(\.[0-9]+)?`
	for _, re := range []string{
		`(?m)^kvp2p bench --fleet: 2 sources, 1 consumer, 127\.0\.0\.1; requests of 2 blocks of 65536 bytes`,
		`(?m)^one load at a time: +` + num + ` MB/s`,
		`(?m)^ 2 loads at once, one a source: +` + num + ` MB/s, ` + num + ` of one at a time$`,
		`(?m)^ +20 +` + num + ` +` + num + ` +[0-9]+ +[0-9]+ +` + num + ` +` + num + ` +` + num + ` +(n/a|[0-9]+%)$`,
		`(?m)^ +40 +`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", re, &out)
		}
	}
	out.Reset()
	if code := run(context.Background(), append(args, "--json"), &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d; stderr:\n%s", code, &errb)
	}
	var rep bench.FleetReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Curve) != 2 || rep.SingleMBs <= 0 || rep.ParallelMBs <= 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range rep.Curve {
		if p.Hits == 0 || p.Failed != 0 {
			t.Errorf("rate %v: %d hits, %d failed", p.Rate, p.Hits, p.Failed)
		}
	}
	if code := run(context.Background(), []string{"bench", "--fleet", "--rates", "0"}, &out, &errb); code != 2 {
		t.Errorf("--rates 0: exit %d, want 2", code)
	}
}
