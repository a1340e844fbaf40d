package lambdatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// runtimeAPIPrefix is the path of the Lambda Runtime API, version 2018-06-01.
const runtimeAPIPrefix = "/2018-06-01/runtime/"

// RuntimeAPI is an in-test Lambda Runtime API
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html), the
// endpoints aws-lambda-go's runtime loop polls for events and posts results
// to: a function process started with AWS_LAMBDA_RUNTIME_API=Addr() serves
// the events Invoke queues, as many at once as its
// AWS_LAMBDA_MAX_CONCURRENCY allows (Lambda Managed Instances).
type RuntimeAPI struct {
	srv    *httptest.Server
	queue  chan *invocation
	closed chan struct{}

	mu       sync.Mutex
	pending  map[string]*invocation
	inFlight int // taken by a poll, not answered yet
	maxIn    int
	initErr  []byte
}

// invocation is one event on its way through the function.
type invocation struct {
	id      string
	payload []byte
	done    chan result
}

type result struct {
	body []byte
	err  error
}

// FunctionError is an invocation's error as the runtime posts it.
type FunctionError struct {
	Message string `json:"errorMessage"`
	Type    string `json:"errorType"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// NewRuntimeAPI starts a Runtime API that lives until the test ends.
func NewRuntimeAPI(t testing.TB) *RuntimeAPI {
	t.Helper()
	r := &RuntimeAPI{queue: make(chan *invocation), closed: make(chan struct{}), pending: map[string]*invocation{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		close(r.closed)
		r.srv.Close()
	})
	return r
}

// Addr is the value of AWS_LAMBDA_RUNTIME_API for the function process.
func (r *RuntimeAPI) Addr() string { return strings.TrimPrefix(r.srv.URL, "http://") }

// Invoke hands payload to the next poll of the function and waits for its
// result: the response bytes, or a *FunctionError.
func (r *RuntimeAPI) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	inv := &invocation{id: hex.EncodeToString(b[:]), payload: payload, done: make(chan result, 1)}
	r.mu.Lock()
	r.pending[inv.id] = inv
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.pending, inv.id)
		r.mu.Unlock()
	}()
	select {
	case r.queue <- inv:
	case <-ctx.Done():
		return nil, fmt.Errorf("lambdatest: no poll took the event: %w", ctx.Err())
	}
	select {
	case res := <-inv.done:
		return res.body, res.err
	case <-ctx.Done():
		return nil, fmt.Errorf("lambdatest: no result: %w", ctx.Err())
	}
}

// MaxInFlight reports how many invocations the function ran at once, at
// most.
func (r *RuntimeAPI) MaxInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxIn
}

// InitError returns what the function posted to /runtime/init/error, if
// anything.
func (r *RuntimeAPI) InitError() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initErr
}

func (r *RuntimeAPI) serve(w http.ResponseWriter, req *http.Request) {
	path, ok := strings.CutPrefix(req.URL.Path, runtimeAPIPrefix)
	if !ok {
		http.NotFound(w, req)
		return
	}
	switch {
	case req.Method == http.MethodGet && path == "invocation/next":
		select {
		case inv := <-r.queue:
			r.mu.Lock()
			r.inFlight++
			r.maxIn = max(r.maxIn, r.inFlight)
			r.mu.Unlock()
			h := w.Header()
			h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10))
			h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:test")
			h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
			h.Set("Content-Type", "application/json")
			_, _ = w.Write(inv.payload)
		case <-req.Context().Done():
		case <-r.closed:
			http.Error(w, "closed", http.StatusGone)
		}
	case req.Method == http.MethodPost && path == "init/error":
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.initErr = body
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	case req.Method == http.MethodPost && strings.HasPrefix(path, "invocation/"):
		id, kind, _ := strings.Cut(strings.TrimPrefix(path, "invocation/"), "/")
		body, err := io.ReadAll(req.Body)
		r.mu.Lock()
		inv := r.pending[id]
		r.mu.Unlock()
		if inv == nil || err != nil || (kind != "response" && kind != "error") {
			http.Error(w, "unknown invocation", http.StatusBadRequest)
			return
		}
		res := result{body: body}
		if kind == "error" {
			var fe FunctionError
			if jerr := json.Unmarshal(body, &fe); jerr != nil {
				res.err = errors.New("lambdatest: undecodable function error: " + string(body))
			} else {
				res.err = &fe
			}
			res.body = nil
		}
		select {
		case inv.done <- res:
		default: // a second result for the same invocation
			http.Error(w, "invocation already answered", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	default:
		http.NotFound(w, req)
	}
}
