package lab

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// EvidenceDir is where a run with false fallbacks leaves its processes'
// logs, their configs and those requests' records. Outside StateDir,
// which the lab empties when it ends (Clean), and on disk rather than
// tmpfs: a false fallback that shows once in five runs is explained from
// what its run kept, or not at all.
const EvidenceDir = "/var/tmp/kvp2p-lab"

// keepEvidence copies the run's directory (each rank's log and config)
// to a new directory under root and writes the false fallbacks' records
// there (false.jsonl, as --requests writes them). It returns that
// directory. The run's sockets are not copied.
func keepEvidence(root, runDir string, sc *scenario.Scenario, policy string, false_ []report.Request, at time.Time) (string, error) {
	dst := filepath.Join(root, fmt.Sprintf("%s-%s-%s", sc.Name, policy, at.UTC().Format("20060102T150405")))
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(runDir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue // the engine sockets
		}
		if err := copyFile(filepath.Join(runDir, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return "", err
		}
	}
	f, err := os.Create(filepath.Join(dst, "false.jsonl"))
	if err != nil {
		return "", err
	}
	werr := WriteRequests(f, sc.Name, policy, false_)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return dst, werr
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
