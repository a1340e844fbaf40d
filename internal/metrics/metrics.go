package metrics

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"time"
)

// Emitter writes EMF documents. It is safe for concurrent use; a nil *Emitter
// discards everything.
type Emitter struct {
	namespace string
	dims      map[string]string
	dimNames  []string // sorted keys of dims

	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

// New returns an Emitter writing to w under namespace, every metric carrying
// the dimensions dims (one dimension set with all of them).
func New(w io.Writer, namespace string, dims map[string]string) *Emitter {
	names := make([]string, 0, len(dims))
	for k := range dims {
		names = append(names, k)
	}
	slices.Sort(names)
	return &Emitter{namespace: namespace, dims: dims, dimNames: names, w: w, now: time.Now}
}

// Count writes one document counting 1 for each of names (usually one).
// Metric names must differ from the dimension names.
func (e *Emitter) Count(names ...string) {
	if e == nil || len(names) == 0 {
		return
	}
	metrics := make([]metric, len(names))
	for i, n := range names {
		metrics[i] = metric{Name: n, Unit: "Count"}
	}
	dims := e.dimNames
	if dims == nil {
		dims = []string{}
	}
	doc := envelope{
		Timestamp: e.now().UnixMilli(),
		CloudWatchMetrics: []directive{{
			Namespace:  e.namespace,
			Dimensions: [][]string{dims},
			Metrics:    metrics,
		}},
	}
	var b bytes.Buffer
	b.WriteString(`{"_aws":`)
	writeJSON(&b, doc)
	for _, k := range e.dimNames {
		b.WriteByte(',')
		writeJSON(&b, k)
		b.WriteByte(':')
		writeJSON(&b, e.dims[k])
	}
	for _, n := range names {
		b.WriteByte(',')
		writeJSON(&b, n)
		b.WriteString(":1")
	}
	b.WriteString("}\n")

	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(b.Bytes()) // metrics are best effort
}

type envelope struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

type directive struct {
	Namespace  string     `json:"Namespace"`
	Dimensions [][]string `json:"Dimensions"`
	Metrics    []metric   `json:"Metrics"`
}

type metric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

func writeJSON(b *bytes.Buffer, v any) {
	out, _ := json.Marshal(v) // strings and plain structs always marshal
	b.Write(out)
}
