package metrics

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Emitter writes EMF documents. It is safe for concurrent use; a nil *Emitter
// discards everything.
type Emitter struct {
	namespace string
	dims      map[string]string
	dimNames  []string // sorted keys of dims

	mu    sync.Mutex
	w     io.Writer
	now   func() time.Time
	tails map[string][]byte // by metric name: a one-name document after its timestamp
	buf   []byte            // the document being written
}

// maxTails bounds the documents an Emitter keeps, one per metric name: a
// program counts a few names; past the bound a document is built anew.
const maxTails = 64

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
//
// A document is the same for every count of a name but for its timestamp,
// which comes first: the rest is built once per name (for up to maxTails
// names) and kept.
func (e *Emitter) Count(names ...string) {
	if e == nil || len(names) == 0 {
		return
	}
	ts := e.now().UnixMilli()
	e.mu.Lock()
	defer e.mu.Unlock()
	var tail []byte
	if len(names) == 1 {
		tail = e.tails[names[0]]
	}
	if tail == nil {
		tail = e.tail(names, 1)
		if len(names) == 1 && len(e.tails) < maxTails {
			if e.tails == nil {
				e.tails = map[string][]byte{}
			}
			e.tails[names[0]] = tail
		}
	}
	b := append(e.buf[:0], timestampPrefix...)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, tail...)
	e.buf = b
	_, _ = e.w.Write(b) // metrics are best effort
}

// PutAt writes one document giving the metric name the value v, stamped
// at: a figure measured at once (how many records an audit found stuck, 0
// included), where Count counts one occurrence, and one that belongs to
// the moment at rather than to when it is written (the hour a scheduled
// run was due in, when it runs late). CloudWatch takes an EMF timestamp up
// to two weeks in the past and two hours in the future. Its document is
// built anew each time.
func (e *Emitter) PutAt(name string, v int64, at time.Time) {
	if e == nil {
		return
	}
	ts := at.UnixMilli()
	e.mu.Lock()
	defer e.mu.Unlock()
	b := append(e.buf[:0], timestampPrefix...)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, e.tail([]string{name}, v)...)
	e.buf = b
	_, _ = e.w.Write(b) // metrics are best effort
}

// timestampPrefix starts every document, up to its timestamp's digits.
const timestampPrefix = `{"_aws":{"Timestamp":`

// tail returns the document giving each of names the value v, after its
// timestamp.
func (e *Emitter) tail(names []string, v int64) []byte {
	metrics := make([]metric, len(names))
	for i, n := range names {
		metrics[i] = metric{Name: n, Unit: "Count"}
	}
	dims := e.dimNames
	if dims == nil {
		dims = []string{}
	}
	doc := envelope{
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
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(v, 10))
	}
	b.WriteString("}\n")
	// The envelope's first field is its Timestamp, zero here.
	return bytes.Clone(bytes.TrimPrefix(b.Bytes(), []byte(timestampPrefix+"0")))
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
