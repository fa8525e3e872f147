package chart

import (
	"os"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// WriteFile draws the runs of sc into the file at path (SVG); nothing if
// path is empty.
func WriteFile(path string, sc *scenario.Scenario, runs []report.Run) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := SVG(f, sc, runs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
