package report

import (
	"fmt"
	"io"
)

// Collector gathers the (scenario, policy) runs of a command (kvp2p sim,
// demo, lab): with JSON set it prints each run's report as one line of
// JSON as the run ends (docs/design.md §7's --json), and Table prints the table
// of every run at the end.
type Collector struct {
	w    io.Writer
	json bool
	runs []Run
}

// NewCollector writes to w; json: one JSON object a line per run.
func NewCollector(w io.Writer, json bool) *Collector { return &Collector{w: w, json: json} }

// Add records one run, and prints its report under JSON.
func (c *Collector) Add(r Run) error {
	c.runs = append(c.runs, r)
	if !c.json {
		return nil
	}
	b, err := r.Report.JSON()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.w, "%s\n", b)
	return nil
}

// Runs are the runs added, in order.
func (c *Collector) Runs() []Run { return c.runs }

// Reports are the runs' reports, in order.
func (c *Collector) Reports() []Report {
	out := make([]Report, len(c.runs))
	for i, r := range c.runs {
		out[i] = r.Report
	}
	return out
}

// Table prints docs/design.md §7's table of every run.
func (c *Collector) Table() { Table(c.w, c.Reports()) }

// NarrowTable prints the narrow table of every run (NarrowTable).
func (c *Collector) NarrowTable() { NarrowTable(c.w, c.Reports()) }

// Legend explains the columns of Table (narrow: NarrowTable) of every run.
func (c *Collector) Legend(narrow bool) { Legend(c.w, c.Reports(), narrow) }

// AblationTable prints the ablation matrix of every run.
func (c *Collector) AblationTable() { AblationTable(c.w, c.Reports()) }
