package config

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzConfigYAML: any bytes as a config file give a config or a
// *Error, never a panic; a decoded config validates without panic.
func FuzzConfigYAML(f *testing.F) {
	if b, err := os.ReadFile("../../examples/kvp2p.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(baseYAML))
	f.Add([]byte("timers: {heartbeat_interval: -1s}\nslots: 99999999999999\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("tls:\n  cert_file: x\n  allow_peers: '[x'\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var cfg Serve
		fields, groups := Fields(&cfg)
		if err := DecodeYAML(bytes.NewReader(b), "fuzz.yaml", fields, groups); err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *Error", err, err)
			}
			return
		}
		_ = cfg.Validate()
	})
}
