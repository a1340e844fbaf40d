package idempotency

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
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

// WriteHeader keeps the first final status. An informational one (1xx but
// 101 Switching Protocols, as net/http counts them: 103 Early Hints) is
// dropped, not sent ahead: the answer is buffered until it is stored, and a
// replay could not send it again, so the client gets the same answer the
// first time as on a replay. The header fields set for it stay in the
// header, as net/http keeps them for the final response.
func (r *recorder) WriteHeader(status int) {
	if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		return
	}
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

// response is the answer as stored: every header field but the unstored,
// a field of several values as one line (see Response.Header), and every
// Set-Cookie line apart.
func (r *recorder) response() *Response {
	resp := &Response{Status: r.statusOrOK(), Header: make(map[string]string, len(r.header)), Body: bytes.Clone(r.body.Bytes())}
	for k, v := range r.header {
		switch {
		case len(v) == 0 || unstored[http.CanonicalHeaderKey(k)]:
		case http.CanonicalHeaderKey(k) == "Set-Cookie":
			resp.SetCookie = append(resp.SetCookie, v...)
		default:
			resp.Header[k] = strings.Join(v, ", ")
		}
	}
	return resp
}

// sent is the answer as flush sends it, for Config.Deliverable to
// measure: response's fields and the unstored ones the handler set (but
// Content-Length, which a size counts itself, and Idempotent-Replayed,
// which flush does not send), the spellings of one name
// merged into one field, so that a field set twice under two spellings is
// counted once for each value, as it is sent.
func (r *recorder) sent() *Response {
	resp := &Response{Status: r.statusOrOK(), Header: make(map[string]string, len(r.header)), Body: r.body.Bytes()}
	for k, v := range r.header {
		ck := http.CanonicalHeaderKey(k)
		switch {
		case len(v) == 0 || ck == "Content-Length" || ck == ReplayedHeader:
		case ck == "Set-Cookie":
			resp.SetCookie = append(resp.SetCookie, v...)
		case resp.Header[ck] != "":
			resp.Header[ck] += ", " + strings.Join(v, ", ")
		default:
			resp.Header[ck] = strings.Join(v, ", ")
		}
	}
	return resp
}

func (r *recorder) statusOrOK() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// flush sends the answer as a replay of it would be sent: a field of
// several values as one line, and no Idempotent-Replayed the handler set
// (the Middleware's own field, which marks replays only).
func (r *recorder) flush(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.header {
		if http.CanonicalHeaderKey(k) == ReplayedHeader {
			continue
		}
		if len(v) > 1 && http.CanonicalHeaderKey(k) != "Set-Cookie" {
			v = []string{strings.Join(v, ", ")}
		}
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(r.body.Len()))
	w.WriteHeader(r.statusOrOK())
	_, _ = w.Write(r.body.Bytes())
}
