package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Figure names, the keys of Row.Figures.
const (
	FigCalls       = "calls"        // DynamoDB calls per operation
	FigRCU         = "rcu"          // read capacity units per operation
	FigWCU         = "wcu"          // write capacity units per operation
	FigComputedWCU = "wcu_computed" // the part of FigWCU computed from item sizes (failed writes)
	FigP50         = "p50_ms"
	FigP99         = "p99_ms"
	FigAllocs      = "allocs" // heap allocations per operation
	FigReqPerSec   = "req_per_s"
	FigDynamoCPU   = "dynamodb_cpu_ms" // DynamoDB Local's CPU time per request, the front door's (Linux)
	FigServerCPU   = "server_cpu_ms"   // the devstack's process's CPU time per request, the front door's (its clients in a process of their own)
	FigErrors      = "errors"
	FigBytes       = "bytes"  // item bytes stored, as DynamoDB counts them
	FigItems       = "items"  // items stored
	FigAnswer      = "answer" // bytes of the answer stored
	FigExtra       = "effects_beyond_one_per_key"
	FigDiffering   = "keys_with_differing_answers"
	FigEffectless  = "keys_without_effect"
	FigInitMS      = "init_ms" // process start to its first poll of the Runtime API
	FigSizeMB      = "size_mb"
)

// Row is one line of the table: a case of a group (an endpoint's outcome,
// a route at the front door, a storm, a stored answer, a function's cold
// start), its figures, and their ratios to the baselines measured in the
// same run.
type Row struct {
	Group string `json:"group"`
	Case  string `json:"case"`
	// N is the number of operations measured.
	N int `json:"n"`
	// Answers is the histogram of the answers ("201", "201 replayed",
	// "409").
	Answers map[string]int `json:"answers,omitempty"`
	// Calls is the DynamoDB calls per operation, by operation.
	Calls   map[string]float64 `json:"calls,omitempty"`
	Figures map[string]float64 `json:"figures"`
	// Ratios are figures divided by the same figures of baselines measured
	// in the same run (Ratio.Baseline names each): those of the group's
	// baseline rows, in the order of those rows.
	Ratios []Ratio `json:"ratios,omitempty"`
	// Baseline is set on a baseline's own row.
	Baseline bool `json:"baseline,omitempty"`
}

// Ratio is a figure of a row divided by a baseline's.
type Ratio struct {
	Baseline string  `json:"baseline"`
	Figure   string  `json:"figure"`
	Value    float64 `json:"value"`
}

// Report is a whole run: the table and how it was made.
type Report struct {
	Started  time.Time     `json:"started"`
	Took     time.Duration `json:"took_ns"`
	Host     Host          `json:"host"`
	Settings Settings      `json:"settings"`
	Rows     []Row         `json:"rows"`
	Notes    []string      `json:"notes,omitempty"`
}

// Host describes the machine of a run.
type Host struct {
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	CPU       string `json:"cpu,omitempty"`
	// LoadBefore and LoadAfter are the 1-minute load averages at the start
	// and at the end (Linux).
	LoadBefore float64 `json:"load_before,omitempty"`
	LoadAfter  float64 `json:"load_after,omitempty"`
	DynamoDB   string  `json:"dynamodb"`
}

// ratio returns num/den, NaN when den is 0.
func ratio(num, den float64) float64 {
	if den == 0 {
		return math.NaN()
	}
	return num / den
}

// compare adds to r the ratios of figs to the same figures of base.
func (r *Row) compare(base Row, figs ...string) {
	for _, f := range figs {
		v, ok1 := r.Figures[f]
		b, ok2 := base.Figures[f]
		if ok1 && ok2 {
			r.Ratios = append(r.Ratios, Ratio{Baseline: base.Case, Figure: f, Value: ratio(v, b)})
		}
	}
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonSafe(rep))
}

// jsonSafe is rep with NaN and infinite ratios (a baseline of 0) dropped,
// which JSON cannot carry.
func jsonSafe(rep *Report) *Report {
	out := *rep
	out.Rows = make([]Row, len(rep.Rows))
	for i, r := range rep.Rows {
		r.Ratios = slices.DeleteFunc(slices.Clone(r.Ratios), func(x Ratio) bool {
			return math.IsNaN(x.Value) || math.IsInf(x.Value, 0)
		})
		out.Rows[i] = r
	}
	return &out
}

// WriteMarkdown writes the report's table, then its notes.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "once bench, %s, %s/%s, %d CPUs%s, load %.1f → %.1f, %s, took %s\n\n",
		rep.Started.UTC().Format("2006-01-02 15:04 MST"), rep.Host.OS, rep.Host.Arch, rep.Host.CPUs,
		cpuName(rep.Host.CPU), rep.Host.LoadBefore, rep.Host.LoadAfter, rep.Host.GoVersion, rep.Took.Round(time.Second))
	header := []string{"group", "case", "n", "answers", "DynamoDB calls/op", "RCU/op", "WCU/op", "p50 ms", "p99 ms", "allocs/op", "other", "× baseline"}
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(header)) + "\n")
	for _, r := range rep.Rows {
		cells := []string{
			r.Group, caseCell(r), strconv.Itoa(r.N), answersCell(r.Answers), callsCell(r),
			figCell(r, FigRCU), figCell(r, FigWCU), figCell(r, FigP50), figCell(r, FigP99),
			figCell(r, FigAllocs), otherCell(r), ratiosCell(r),
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	for _, n := range rep.Notes {
		b.WriteString("\n" + n + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cpuName(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func caseCell(r Row) string {
	if r.Baseline {
		return "*" + r.Case + "* (baseline)"
	}
	return r.Case
}

// num formats f with up to 2 decimals, trailing zeros dropped; thousands
// and more without decimals.
func num(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "—"
	case math.Abs(f) >= 1000 || f == math.Trunc(f):
		return strconv.FormatFloat(math.Round(f), 'f', 0, 64)
	case math.Abs(f) >= 100:
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	s := strconv.FormatFloat(f, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

func figCell(r Row, fig string) string {
	v, ok := r.Figures[fig]
	if !ok {
		return ""
	}
	return num(v)
}

func answersCell(a map[string]int) string {
	if len(a) == 0 {
		return ""
	}
	labels := slices.Sorted(maps.Keys(a))
	slices.SortStableFunc(labels, func(x, y string) int { return a[y] - a[x] })
	if len(labels) == 1 {
		return labels[0]
	}
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = fmt.Sprintf("%s ×%d", l, a[l])
	}
	return strings.Join(parts, ", ")
}

func callsCell(r Row) string {
	total, ok := r.Figures[FigCalls]
	if !ok {
		return ""
	}
	if total == 0 {
		return "0"
	}
	ops := slices.Sorted(maps.Keys(r.Calls))
	slices.SortStableFunc(ops, func(a, b string) int {
		switch {
		case r.Calls[a] > r.Calls[b]:
			return -1
		case r.Calls[a] < r.Calls[b]:
			return 1
		}
		return 0
	})
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		parts = append(parts, op+" "+num(r.Calls[op]))
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return num(total) + ": " + strings.Join(parts, ", ")
}

// otherCell renders the figures of the groups without calls: throughput,
// bytes stored, storm checks, cold starts.
func otherCell(r Row) string {
	var parts []string
	add := func(fig, format string) {
		if v, ok := r.Figures[fig]; ok {
			parts = append(parts, fmt.Sprintf(format, num(v)))
		}
	}
	add(FigReqPerSec, "%s req/s")
	add(FigServerCPU, "server CPU %s ms/req")
	add(FigDynamoCPU, "DynamoDB Local CPU %s ms/req")
	add(FigErrors, "%s errors")
	add(FigExtra, "%s effects beyond one per key")
	add(FigDiffering, "%s keys with differing answers")
	if r.Figures[FigEffectless] > 0 {
		add(FigEffectless, "%s keys without an effect")
	}
	add(FigAnswer, "answer %s B")
	add(FigBytes, "%s B stored")
	add(FigItems, "in %s items")
	add(FigInitMS, "init %s ms")
	add(FigSizeMB, "%s MB")
	return strings.Join(parts, ", ")
}

// figureNames are the short names of figures in the ratio column.
var figureNames = map[string]string{
	FigCalls: "calls", FigRCU: "RCU", FigWCU: "WCU", FigP50: "p50", FigP99: "p99", FigAllocs: "allocs",
	FigReqPerSec: "req/s", FigDynamoCPU: "DynamoDB Local CPU", FigServerCPU: "server CPU", FigBytes: "bytes", FigSizeMB: "size", FigExtra: "extra effects",
}

// ratiosCell renders a row's ratios figure by figure, one per baseline in
// order: "p50 ×3.1 ×1.2 · WCU ×4 ×1".
func ratiosCell(r Row) string {
	var figs []string
	by := map[string][]string{}
	for _, x := range r.Ratios {
		if _, seen := by[x.Figure]; !seen {
			figs = append(figs, x.Figure)
		}
		by[x.Figure] = append(by[x.Figure], "×"+num(x.Value))
	}
	parts := make([]string, len(figs))
	for i, f := range figs {
		name := figureNames[f]
		if name == "" {
			name = f
		}
		parts[i] = name + " " + strings.Join(by[f], " ")
	}
	return strings.Join(parts, " · ")
}
