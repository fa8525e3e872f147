package status

import (
	_ "embed"
	"html/template"
	"io"
	"strings"

	"github.com/kvp2p/kvp2p/internal/metrics"
)

//go:embed page.html
var pageHTML string

// RefreshSeconds is how often the page reloads itself.
const RefreshSeconds = 2

// pageData is what the template sees.
type pageData struct {
	S       *metrics.Snapshot
	Ready   bool
	Refresh int
	Counts  map[string]int // domains by state
	TTF     histView
	TTH     histView
	Ends    []kv
}

type kv struct {
	K string
	V uint64
}

type histView struct {
	Bars     []bar
	Count    uint64
	P50, P99 float64
}

type bar struct {
	Label string
	Short string // under the column: the bucket's bound
	N     uint64
	Pct   float64 // of the largest bucket, for the bar's width
}

func newHistView(h metrics.Hist) histView {
	v := histView{Count: h.Count, P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
	var top uint64
	for _, c := range h.Counts {
		top = max(top, c)
	}
	for i, c := range h.Counts {
		b := bar{Label: h.BucketLabel(i), Short: strings.TrimPrefix(h.BucketLabel(i), "≤ "), N: c}
		if top > 0 {
			b.Pct = 100 * float64(c) / float64(top)
		}
		v.Bars = append(v.Bars, b)
	}
	return v
}

// newPage parses the page; it is embedded, so a parse error is a bug the
// tests catch.
func newPage() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"dur": Dur, "bytes": Bytes,
	}).Parse(pageHTML))
}

func renderPage(t *template.Template, w io.Writer, s *metrics.Snapshot) error {
	d := pageData{S: s, Ready: s.Node.Ready(), Refresh: RefreshSeconds, Counts: map[string]int{},
		TTF: newHistView(s.Hists.Fallbacks()), TTH: newHistView(s.Hists.TimeToHit)}
	for _, dom := range s.Domains {
		d.Counts[dom.State]++
	}
	for _, c := range metrics.CauseNames() {
		if n := s.Counters.SessionEnds[c]; n > 0 {
			d.Ends = append(d.Ends, kv{c, n})
		}
	}
	return t.Execute(w, d)
}
