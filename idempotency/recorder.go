package idempotency

import (
	"bytes"
	"net/http"
	"strconv"
)

// recorder buffers a handler's response so that it can be stored before it is
// sent, or discarded.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// unstored names headers that describe a transmission, not the response.
var unstored = map[string]bool{"Content-Length": true, "Date": true, "Idempotent-Replayed": true}

func (r *recorder) response() *Response {
	h := make(map[string]string, len(r.header))
	for k, v := range r.header {
		if len(v) > 0 && !unstored[k] {
			h[k] = v[0]
		}
	}
	return &Response{Status: r.statusOrOK(), Header: h, Body: bytes.Clone(r.body.Bytes())}
}

func (r *recorder) statusOrOK() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

func (r *recorder) flush(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(r.body.Len()))
	w.WriteHeader(r.statusOrOK())
	_, _ = w.Write(r.body.Bytes())
}
