package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

// TestCallRecord checks that Call.Record is the reservation as stored, so a
// response built from it can be rebuilt from the store.
func TestCallRecord(t *testing.T) {
	now := time.Unix(1700000000, 123_456_789)
	tests := []struct {
		mode idempotency.Mode
		want idempotency.Record // LeaseToken is checked apart
	}{
		{idempotency.Atomic, idempotency.Record{}},
		{idempotency.Leased, idempotency.Record{
			Key: idempotency.NewKey("acme", "k"), Status: idempotency.StatusInProgress, Route: "POST /v1/things",
			ExpiresAt: now.Add(idempotency.DefaultLease), CreatedAt: now, UpdatedAt: now,
		}},
		{idempotency.External, idempotency.Record{
			Key: idempotency.NewKey("acme", "k"), Status: idempotency.StatusInProgress, Route: "POST /v1/things", External: true,
			ExpiresAt: now.Add(idempotency.DefaultLease), Request: []byte(`{"a":1,"b":"x"}`), CreatedAt: now, UpdatedAt: now,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{
				Store:  store,
				Tenant: func(*http.Request) (string, bool) { return "acme", true },
				OnError: func(w http.ResponseWriter, _ *http.Request, err error) {
					http.Error(w, err.Error(), http.StatusInternalServerError)
				},
				Now: func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			var got idempotency.Record
			h := wrap(mw, tt.mode, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					t.Fatal("Begin() = false, want true")
				}
				got = call.Record()
				w.WriteHeader(http.StatusCreated)
			}))
			r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(`{ "b": "x", "a": 1 }`))
			r.Header.Set(idempotency.Header, "k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				t.Fatalf("status = %d %s, want 201", w.Code, w.Body)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(idempotency.Record{}, "Fingerprint", "LeaseToken")); diff != "" {
				t.Errorf("Record() mismatch (-want +got):\n%s", diff)
			}
			if tt.mode == idempotency.Atomic {
				return
			}
			if got.LeaseToken == "" || got.Fingerprint == "" {
				t.Errorf("Record() = %+v, want a lease token and a fingerprint", got)
			}
			stored, err := store.Get(t.Context(), got.Key)
			if err != nil {
				t.Fatal(err)
			}
			if stored.CreatedAt.Unix() != got.CreatedAt.Unix() || string(stored.Request) != string(got.Request) {
				t.Errorf("stored record created %v request %s, want Record()'s %v %s", stored.CreatedAt, stored.Request, got.CreatedAt, got.Request)
			}
		})
	}
}

// TestKeyOf checks that a handler learns its request's key before Begin, to
// name the holds it passes to Begin, and that it is the key Begin records.
func TestKeyOf(t *testing.T) {
	mw, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	var before idempotency.Key
	h := wrap(mw, idempotency.External, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ok bool
		if before, ok = idempotency.KeyOf(r); !ok {
			t.Error("KeyOf() before Begin = false, want true")
		}
		call, ok := idempotency.Begin(w, r)
		if !ok {
			t.Fatal("Begin() = false, want true")
		}
		if got := call.Record().Key; got != before {
			t.Errorf("Record().Key = %v, KeyOf() before Begin = %v; want the same", got, before)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(`{}`))
	r.Header.Set(idempotency.Header, "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if want := idempotency.NewKey("acme", "k"); before != want {
		t.Errorf("KeyOf() = %v, want %v", before, want)
	}
	if _, ok := idempotency.KeyOf(httptest.NewRequest("POST", "/", nil)); ok {
		t.Error("KeyOf() outside a Middleware = true, want false")
	}
}

// wrap wraps h under mode, External with a resolver that finds nothing.
func wrap(mw *idempotency.Middleware, mode idempotency.Mode, route string, h http.Handler) http.Handler {
	if mode == idempotency.External {
		return mw.External(route, h, idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
			return idempotency.Resolution{}, nil
		}))
	}
	return mw.Wrap(mode, route, h)
}

// TestImpreciseNumberRefused: a body with a number a 64-bit float cannot
// hold exactly enough to tell it from its neighbours (2^53 + 1 reads as 2^53)
// is refused 400 invalid_request before anything runs or is stored, in every
// mode, so that two requests differing only there never share a fingerprint;
// the same number as a double writes it goes through.
func TestImpreciseNumberRefused(t *testing.T) {
	for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
		t.Run(mode.String(), func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if err != nil {
				t.Fatal(err)
			}
			var runs int
			h := wrap(mw, mode, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); !ok {
					return
				}
				runs++
				w.WriteHeader(http.StatusCreated)
			}))
			send := func(key, body string) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(body))
				r.Header.Set(idempotency.Header, key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}

			w := send("k", `{"account": 9007199254740993}`)
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"code":"invalid_request"`) ||
				!strings.Contains(w.Body.String(), "more precision than a 64-bit float") {
				t.Errorf("2^53 + 1 = %d %s, want 400 invalid_request saying the number is too precise", w.Code, w.Body)
			}
			if _, err := store.Get(t.Context(), idempotency.NewKey("acme", "k")); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after the refusal: %v, want none", err)
			}
			if w := send("k", `{"account": 9007199254740992.0}`); w.Code != http.StatusCreated {
				t.Errorf("2^53 under the same key = %d %s, want 201 (nothing was stored for the refused one)", w.Code, w.Body)
			}
			if w := send("k", `{"account": 9007199254740992}`); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
				t.Errorf("2^53 again = %d (replayed %q), want the 201 replayed", w.Code, w.Header().Get(idempotency.ReplayedHeader))
			}
			want := 1
			if mode == idempotency.Atomic {
				want = 2 // Atomic runs the handler before its commit finds the replay
			}
			if runs != want {
				t.Errorf("handler ran %d times, want %d", runs, want)
			}
		})
	}
}

// TestReplayHeaders: a replay carries the header fields the live answer
// carried, value for value: a field given several values is sent as one
// line, joined with ", " (RFC 9110 §5.3), live and replayed alike, and
// every Set-Cookie line stays a line of its own.
func TestReplayHeaders(t *testing.T) {
	for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
		t.Run(mode.String(), func(t *testing.T) {
			mw, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if err != nil {
				t.Fatal(err)
			}
			h := wrap(mw, mode, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); !ok {
					return
				}
				w.Header().Add("Link", `</v1/things/1>; rel="self"`)
				w.Header().Add("Link", `</v1/things>; rel="collection"`)
				w.Header().Add("Set-Cookie", "a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT")
				w.Header().Add("Set-Cookie", "b=2; Path=/")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(`{}`))
			}))
			send := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(`{}`))
				r.Header.Set(idempotency.Header, "k")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			first, again := send(), send()
			want := http.Header{
				"Link":           {`</v1/things/1>; rel="self", </v1/things>; rel="collection"`},
				"Set-Cookie":     {"a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT", "b=2; Path=/"},
				"Content-Type":   {"application/json"},
				"Content-Length": {"2"},
			}
			if diff := cmp.Diff(want, first.Header()); diff != "" {
				t.Errorf("live answer's header mismatch (-want +got):\n%s", diff)
			}
			want.Set(idempotency.ReplayedHeader, "true")
			if diff := cmp.Diff(want, again.Header()); diff != "" {
				t.Errorf("replay's header mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReplayByteForByte: a replay sends the stored answer's bytes as the
// live answer sent them, whitespace, NUL bytes and all, with a
// Content-Length of their length and the live answer's header fields:
// warm (from the Cache of the Middleware that stored it) and cold (a new
// Middleware on the same store, its cache empty), in each mode, on each
// store.
func TestReplayByteForByte(t *testing.T) {
	var encoded bytes.Buffer
	encoded.WriteString("  \t")
	if err := json.NewEncoder(&encoded).Encode(map[string]any{"id": "t1", "note": " padded "}); err != nil {
		t.Fatal(err)
	}
	encoded.WriteString(" \r\n\n")
	binary := []byte("\x00 \n\x00\x01\xffbin\x00\x7f\r\n\x00 \t\n")
	for i := range 300 {
		binary = append(binary, byte(i*7), 0)
	}
	binary = append(binary, " \n"...)
	bodies := []struct {
		name        string
		contentType string
		body        []byte
	}{
		{"json with whitespace around", "application/json", encoded.Bytes()},
		{"binary with NUL bytes", "application/octet-stream", binary},
		{"whitespace only", "text/plain", []byte(" \n\t \n")},
		{"empty", "", nil},
	}
	eachStore(t, func(t *testing.T, s testStore) {
		for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
			for _, tt := range bodies {
				t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
					handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if _, ok := idempotency.Begin(w, r); !ok {
							return
						}
						if tt.contentType != "" {
							w.Header().Set("Content-Type", tt.contentType)
						}
						w.Header().Set("Location", "/v1/things/t1")
						w.Header().Set("X-Request-Note", "  spaced  ")
						w.WriteHeader(http.StatusCreated)
						w.Write(tt.body)
					})
					send := func(h http.Handler) (*httptest.ResponseRecorder, idempotency.Observation) {
						return sendObserved(h, "/v1/things", t.Name())
					}
					// endpoint is the handler wrapped by a Middleware of its own on s.
					endpoint := func(cache *idempotency.Cache) http.Handler {
						mw, err := idempotency.New(idempotency.Config{Store: s, Cache: cache, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
						if err != nil {
							t.Fatal(err)
						}
						return wrap(mw, mode, "POST /v1/things", handler)
					}
					warm := endpoint(idempotency.NewCache(8, 1<<20))

					first, _ := send(warm)
					if first.Code != http.StatusCreated || !bytes.Equal(first.Body.Bytes(), tt.body) {
						t.Fatalf("live answer = %d %q, want 201 %q", first.Code, first.Body, tt.body)
					}
					want := first.Header().Clone()
					want.Set("Content-Length", strconv.Itoa(len(tt.body)))
					want.Set(idempotency.ReplayedHeader, "true")
					for _, replay := range []struct {
						name     string
						h        http.Handler
						cacheHit bool
					}{
						{"warm", warm, true},
						{"cold", endpoint(nil), false},
					} {
						w, obs := send(replay.h)
						if w.Code != http.StatusCreated || obs.Outcome != idempotency.OutcomeReplayed || obs.CacheHit != replay.cacheHit {
							t.Errorf("%s replay = %d (%s, cache hit %v), want 201 replayed (cache hit %v)", replay.name, w.Code, obs.Outcome, obs.CacheHit, replay.cacheHit)
						}
						if got := w.Body.Bytes(); !bytes.Equal(got, tt.body) {
							t.Errorf("%s replay's body = %d bytes, want the live answer's %d bytes; they differ from byte %d: %q, want %q",
								replay.name, len(got), len(tt.body), differ(got, tt.body), tail(got, differ(got, tt.body)), tail(tt.body, differ(got, tt.body)))
						}
						if diff := cmp.Diff(want, w.Header()); diff != "" {
							t.Errorf("%s replay's header mismatch (-want +got):\n%s", replay.name, diff)
						}
					}
				})
			}
		}
	})
}

// differ returns the offset of the first byte where a and b differ (the
// shorter one's length when one is the other's start).
func differ(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// tail returns at most 16 bytes of b from offset i.
func tail(b []byte, i int) []byte { return b[i:min(len(b), i+16)] }

// TestKeyReusedWhileInProgress: a request under a key whose original still
// holds its lease (blocked inside its handler) is answered 422 when it is
// another request (another body), whatever state the original is in, and
// 409 in progress, with the lease's Retry-After, only when it is the same
// one: the fingerprint is compared before the record's state. Once the
// original completes, the same request is replayed and the other still
// gets 422. Leased and External mode, on each store.
func TestKeyReusedWhileInProgress(t *testing.T) {
	eachStore(t, func(t *testing.T, s testStore) {
		for _, mode := range []idempotency.Mode{idempotency.Leased, idempotency.External} {
			t.Run(mode.String(), func(t *testing.T) {
				mw, err := idempotency.New(idempotency.Config{Store: s, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
				if err != nil {
					t.Fatal(err)
				}
				inside, release := make(chan struct{}), make(chan struct{})
				entered, unblock := sync.OnceFunc(func() { close(inside) }), sync.OnceFunc(func() { close(release) })
				defer unblock()
				var runs atomic.Int32
				h := wrap(mw, mode, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, ok := idempotency.Begin(w, r); !ok {
						return
					}
					runs.Add(1)
					entered()
					<-release
					w.WriteHeader(http.StatusCreated)
					w.Write([]byte(`{"id":"t1"}`))
				}))
				send := func(body string) *httptest.ResponseRecorder {
					r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(body))
					r.Header.Set(idempotency.Header, t.Name())
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w
				}
				original := make(chan *httptest.ResponseRecorder, 1)
				go func() { original <- send(`{"n":1}`) }()
				select {
				case <-inside:
				case w := <-original:
					t.Fatalf("original = %d %s, want it held inside its handler", w.Code, w.Body)
				}

				tests := []struct {
					name, body     string
					held           bool // sent while the original holds its lease
					wantStatus     int
					wantCode       string // problem code; "": the original's answer, replayed
					wantRetryAfter bool
				}{
					{"another request, held", `{"n":2}`, true, http.StatusUnprocessableEntity, "idempotency_key_reused", false},
					{"the same request, held", `{"n": 1}`, true, http.StatusConflict, "idempotency_request_in_progress", true},
					{"another request, completed", `{"n":2}`, false, http.StatusUnprocessableEntity, "idempotency_key_reused", false},
					{"the same request, completed", `{"n":1}`, false, http.StatusCreated, "", false},
				}
				held := true
				for _, tt := range tests {
					if held && !tt.held {
						unblock()
						if w := <-original; w.Code != http.StatusCreated {
							t.Fatalf("original = %d %s, want 201", w.Code, w.Body)
						}
						held = false
					}
					w := send(tt.body)
					retryAfter, _ := strconv.Atoi(w.Header().Get("Retry-After"))
					switch {
					case w.Code != tt.wantStatus:
						t.Errorf("%s: %d %s, want %d", tt.name, w.Code, w.Body, tt.wantStatus)
					case tt.wantCode != "" && !strings.Contains(w.Body.String(), `"code":"`+tt.wantCode+`"`):
						t.Errorf("%s: %d %s, want the %s problem", tt.name, w.Code, w.Body, tt.wantCode)
					case tt.wantCode == "" && (w.Body.String() != `{"id":"t1"}` || w.Header().Get(idempotency.ReplayedHeader) != "true"):
						t.Errorf("%s: %d %s (replayed %q), want the original's answer replayed", tt.name, w.Code, w.Body, w.Header().Get(idempotency.ReplayedHeader))
					case tt.wantRetryAfter != (retryAfter > 0) || retryAfter > int(idempotency.DefaultLease/time.Second):
						t.Errorf("%s: Retry-After %q, want one within the lease: %v", tt.name, w.Header().Get("Retry-After"), tt.wantRetryAfter)
					}
				}
				if n := runs.Load(); n != 1 {
					t.Errorf("handler ran %d times, want 1", n)
				}
			})
		}
	})
}

// TestReplayOfSingleValueHeaders: a record stored before Set-Cookie lines
// were kept apart (its one Set-Cookie in Header) replays as it was stored.
func TestReplayOfSingleValueHeaders(t *testing.T) {
	store := memory.New()
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Leased("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); ok {
			t.Error("Begin() = true, want the stored answer replayed")
		}
	}))
	fingerprint, err := idempotency.RequestFingerprint("POST", "POST /v1/things", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := store.Commit(t.Context(), idempotency.Record{
		Key: idempotency.NewKey("acme", "k"), Status: idempotency.StatusCompleted, Route: "POST /v1/things",
		Fingerprint: fingerprint, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now,
		Response: &idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Set-Cookie": "a=1", "Link": "</v1/things/1>"}},
	}, nil, now); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(`{}`))
	r.Header.Set(idempotency.Header, "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	want := http.Header{"Set-Cookie": {"a=1"}, "Link": {"</v1/things/1>"}, "Content-Length": {"0"}, idempotency.ReplayedHeader: {"true"}}
	if diff := cmp.Diff(want, w.Header()); w.Code != http.StatusCreated || diff != "" {
		t.Errorf("replay = %d, header mismatch (-want +got):\n%s", w.Code, diff)
	}
}

// TestFingerprintCoversWhatTheRouteLeavesOpen: the same key and body on two
// resources of a route with wildcards are two requests (422 for the
// second), whether a ServeMux routed them by the route's pattern or
// something else did; on a route without wildcards the fingerprint is the
// route's alone, as before; and a POST without a body is a request of its
// own (a replay, then 422 for a body under the same key).
func TestFingerprintCoversWhatTheRouteLeavesOpen(t *testing.T) {
	const route = "POST /v1/things/{id}/capture"
	type send struct {
		path, body string
		want       int
		replayed   bool
	}
	for _, tc := range []struct {
		name  string
		mux   bool // routed by a ServeMux on route's pattern
		route string
		sends []send
	}{
		{"wildcard, ServeMux", true, route, []send{
			{"/v1/things/a/capture", `{"n":1}`, http.StatusCreated, false},
			{"/v1/things/a/capture", `{"n": 1}`, http.StatusCreated, true},
			{"/v1/things/b/capture", `{"n":1}`, http.StatusUnprocessableEntity, false},
		}},
		{"wildcard, routed otherwise", false, route, []send{
			{"/v1/things/a/capture", `{"n":1}`, http.StatusCreated, false},
			{"/v1/things/a/capture", `{"n":1}`, http.StatusCreated, true},
			{"/v1/things/b/capture", `{"n":1}`, http.StatusUnprocessableEntity, false},
		}},
		{"no body", true, route, []send{
			{"/v1/things/a/capture", "", http.StatusCreated, false},
			{"/v1/things/a/capture", " \n", http.StatusCreated, true},
			{"/v1/things/a/capture", `{}`, http.StatusUnprocessableEntity, false},
		}},
		{"subtree, ServeMux", true, "POST /v1/things/", []send{
			{"/v1/things/a/archive", `{"n":1}`, http.StatusCreated, false},
			{"/v1/things/a/archive", `{"n":1}`, http.StatusCreated, true},
			{"/v1/things/b/archive", `{"n":1}`, http.StatusUnprocessableEntity, false},
			{"/v1/things/", `{"n":1}`, http.StatusUnprocessableEntity, false},
		}},
		{"subtree, routed otherwise", false, "POST /v1/things/", []send{
			{"/v1/things/a/archive", `{"n":1}`, http.StatusCreated, false},
			{"/v1/things/b/archive", `{"n":1}`, http.StatusUnprocessableEntity, false},
		}},
		{"root subtree", true, "/", []send{
			{"/a", `{"n":1}`, http.StatusCreated, false},
			{"/a", `{"n":1}`, http.StatusCreated, true},
			{"/b", `{"n":1}`, http.StatusUnprocessableEntity, false},
		}},
		{"wildcard then subtree", true, "POST /v1/things/{id}/", []send{
			{"/v1/things/a/x", `{"n":1}`, http.StatusCreated, false},
			{"/v1/things/a/x", `{"n":1}`, http.StatusCreated, true},
			{"/v1/things/a/y", `{"n":1}`, http.StatusUnprocessableEntity, false},
		}},
		{"no wildcard", true, "POST /v1/things", []send{
			{"/v1/things", `{"n":1}`, http.StatusCreated, false},
			{"/v1/things", `{"n":1}`, http.StatusCreated, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if err != nil {
				t.Fatal(err)
			}
			var runs int
			var h http.Handler = mw.Leased(tc.route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); !ok {
					return
				}
				runs++
				w.WriteHeader(http.StatusCreated)
			}))
			if tc.mux {
				mux := http.NewServeMux()
				mux.Handle(tc.route, h)
				h = mux
			}
			for i, s := range tc.sends {
				r := httptest.NewRequest("POST", s.path, strings.NewReader(s.body))
				r.Header.Set(idempotency.Header, "k")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if replayed := w.Header().Get(idempotency.ReplayedHeader) == "true"; w.Code != s.want || replayed != s.replayed {
					t.Errorf("send %d (%s %q) = %d (replayed %v) %s, want %d (replayed %v)", i, s.path, s.body, w.Code, replayed, w.Body, s.want, s.replayed)
				}
			}
			if runs != 1 {
				t.Errorf("handler ran %d times, want 1", runs)
			}
			if tc.route == "POST /v1/things" {
				rec, err := store.Get(t.Context(), idempotency.NewKey("acme", "k"))
				want, _ := idempotency.RequestFingerprint("POST", tc.route, []byte(`{"n":1}`))
				if err != nil || rec.Fingerprint != want {
					t.Errorf("fingerprint on a route without wildcards = %q (%v), want %q, as before", rec.Fingerprint, err, want)
				}
			}
		})
	}
}

// TestSuccessWithoutBegin: a handler that answers a success without calling
// Begin (a forgotten Begin) did its work outside the contract, so a retry
// would do it again. It is answered 500 internal_error, with the reason in
// the Observation, never passed off as the endpoint's answer; an answer
// before Begin that is not a success (validation) is sent as it is.
func TestSuccessWithoutBegin(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
		wantErr    bool
	}{
		{"201", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }, http.StatusInternalServerError, true},
		{"204", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }, http.StatusInternalServerError, true},
		{"body, implicit 200", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }, http.StatusInternalServerError, true},
		{"nothing written", func(w http.ResponseWriter, r *http.Request) {}, http.StatusInternalServerError, true},
		{"400 validation", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadRequest) }, http.StatusBadRequest, false},
		{"302", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusFound) }, http.StatusFound, false},
	}
	for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				store := memory.New()
				mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
				if err != nil {
					t.Fatal(err)
				}
				h := wrap(mw, mode, "POST /v1/things", tt.handler)
				for attempt := range 2 {
					obs := &idempotency.Observation{}
					r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(`{}`))
					r = r.WithContext(idempotency.WithObservation(r.Context(), obs))
					r.Header.Set(idempotency.Header, "k")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != tt.wantStatus {
						t.Errorf("attempt %d: status = %d %s, want %d", attempt, w.Code, w.Body, tt.wantStatus)
					}
					if got := obs.Err != ""; got != tt.wantErr {
						t.Errorf("attempt %d: Observation.Err = %q, want one: %v", attempt, obs.Err, tt.wantErr)
					}
					if obs.Outcome != idempotency.OutcomeRejected {
						t.Errorf("attempt %d: Observation.Outcome = %q, want %q", attempt, obs.Outcome, idempotency.OutcomeRejected)
					}
				}
				if _, err := store.Get(t.Context(), idempotency.NewKey("acme", "k")); !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("Get() = %v, want ErrNotFound: nothing stored", err)
				}
			})
		}
	}
}

// TestInformationalStatusNotTheAnswer: an informational status written
// before the final one (103 Early Hints) is not the answer's status: the
// client, the stored record and a replay get the final one, and a 5xx after
// it releases the key (Leased) rather than completing it with the 1xx.
func TestInformationalStatusNotTheAnswer(t *testing.T) {
	tests := []struct {
		name       string
		mode       idempotency.Mode
		final      int
		wantStored bool
	}{
		{"Atomic 201", idempotency.Atomic, http.StatusCreated, true},
		{"Leased 201", idempotency.Leased, http.StatusCreated, true},
		{"External 201", idempotency.External, http.StatusCreated, true},
		{"Leased 503", idempotency.Leased, http.StatusServiceUnavailable, false},
		{"Atomic 503", idempotency.Atomic, http.StatusServiceUnavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader})
			if err != nil {
				t.Fatal(err)
			}
			h := wrap(mw, tt.mode, "POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); !ok {
					return
				}
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.WriteHeader(http.StatusProcessing)
				w.WriteHeader(tt.final)
				w.Write([]byte(`{"id":"n1"}`))
			}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			for attempt := range 2 {
				req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/notes", strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Tenant", "acme")
				req.Header.Set(idempotency.Header, "k")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.final {
					t.Errorf("attempt %d: status = %d, want %d", attempt, resp.StatusCode, tt.final)
				}
			}
			rec, err := store.Get(t.Context(), idempotency.NewKey("acme", "k"))
			switch {
			case !tt.wantStored && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("Get() = %s %+v, %v; want ErrNotFound: a 5xx releases the key", rec.Status, rec.Response, err)
			case tt.wantStored && (err != nil || rec.Response == nil || rec.Response.Status != tt.final):
				t.Errorf("Get() = %+v, %v; want the answer stored with status %d", rec.Response, err, tt.final)
			}
		})
	}
}

// TestUnknownNeedsExternal: Call.Unknown outside External mode is a
// programming error, as BeginAt there is: it panics, naming the route,
// rather than being ignored and the handler's answer stored as final.
// External mode takes it (the record goes UNKNOWN).
func TestUnknownNeedsExternal(t *testing.T) {
	tests := []struct {
		mode      idempotency.Mode
		wantPanic bool
	}{
		{idempotency.Atomic, true},
		{idempotency.Leased, true},
		{idempotency.External, false},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader})
			if err != nil {
				t.Fatal(err)
			}
			h := wrap(mw, tt.mode, "POST /v1/jobs", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				call.Unknown()
				w.WriteHeader(http.StatusAccepted)
			}))
			var got any
			func() {
				defer func() { got = recover() }()
				post(h, "acme", "k", `{}`)
			}()
			if msg := fmt.Sprint(got); (got != nil) != tt.wantPanic || tt.wantPanic && (!strings.Contains(msg, "POST /v1/jobs") || !strings.Contains(msg, "External")) {
				t.Errorf("Unknown() in %s mode: recovered %v, want a panic naming the route and External mode: %v", tt.mode, got, tt.wantPanic)
			}
			rec, err := store.Get(t.Context(), idempotency.NewKey("acme", "k"))
			if err == nil && rec.Status == idempotency.StatusCompleted {
				t.Errorf("Unknown() in %s mode: the record is COMPLETED, want it anything but", tt.mode)
			}
		})
	}
}

// TestSameKeyOnAnotherRoute: a key used on one route and then sent, with the
// same body, to another route of the same Middleware is refused 422
// idempotency_key_reused (the route is in the fingerprint, the key is the
// tenant's): the second route's handler never runs, and the first route's
// retry still replays its answer. Each mode, on each store.
func TestSameKeyOnAnotherRoute(t *testing.T) {
	eachStore(t, func(t *testing.T, s testStore) {
		for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
			t.Run(mode.String(), func(t *testing.T) {
				mw, err := idempotency.New(idempotency.Config{Store: s, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
				if err != nil {
					t.Fatal(err)
				}
				mux := http.NewServeMux()
				for _, route := range []string{"POST /v1/notes", "POST /v1/drafts"} {
					mux.Handle(route, wrap(mw, mode, route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						call, ok := idempotency.Begin(w, r)
						if !ok {
							return
						}
						call.AddEffect(s.insert(t.Name() + r.URL.Path))
						w.WriteHeader(http.StatusCreated)
						fmt.Fprint(w, route)
					})))
				}
				send := func(path string) *httptest.ResponseRecorder {
					r := httptest.NewRequest("POST", path, strings.NewReader(`{"text":"hi"}`))
					r.Header.Set(idempotency.Header, t.Name())
					w := httptest.NewRecorder()
					mux.ServeHTTP(w, r)
					return w
				}
				if w := send("/v1/notes"); w.Code != http.StatusCreated {
					t.Fatalf("first = %d %s, want 201", w.Code, w.Body)
				}
				if w := send("/v1/drafts"); w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), `"code":"idempotency_key_reused"`) {
					t.Errorf("the same key on another route = %d %s, want 422 idempotency_key_reused", w.Code, w.Body)
				}
				if w := send("/v1/notes"); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
					t.Errorf("the first route's retry = %d %s, want its 201 replayed", w.Code, w.Body)
				}
				if !s.inserted(t, t.Name()+"/v1/notes") || s.inserted(t, t.Name()+"/v1/drafts") {
					t.Errorf("effects: the first route's %v, the other's %v; want only the first route's", s.inserted(t, t.Name()+"/v1/notes"), s.inserted(t, t.Name()+"/v1/drafts"))
				}
			})
		}
	})
}
