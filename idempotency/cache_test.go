package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

// TestCache: replays and mismatches of a completed record are answered from
// the cache with no store call, exactly until the record expires, per
// tenant.
func TestCache(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	store := memory.New()
	cache := idempotency.NewCache(100, 1<<20)
	mw, err := idempotency.New(idempotency.Config{
		Store: store, Cache: cache, Retention: time.Hour, Now: func() time.Time { return now },
		Tenant: func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true },
	})
	if err != nil {
		t.Fatal(err)
	}
	executions := 0
	h := mw.Atomic("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		executions++
		fmt.Fprintf(w, "note %d", executions)
	}))
	send := func(tenant, key, body string) (*httptest.ResponseRecorder, idempotency.Observation) {
		var obs idempotency.Observation
		r := httptest.NewRequest("POST", "/v1/notes", strings.NewReader(body))
		r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
		r.Header.Set("X-Tenant", tenant)
		r.Header.Set(idempotency.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w, obs
	}
	tests := []struct {
		name           string
		tenant, body   string
		advance        time.Duration
		wantStatus     int
		wantBody       string
		wantStoreCalls int
		wantCacheHit   bool
		wantExecutions int
	}{
		{"first", "acme", `{"a":1}`, 0, 200, "note 1", 1, false, 1},
		{"replay", "acme", `{"a":1}`, 0, 200, "note 1", 0, true, 1},
		{"mismatch", "acme", `{"a":2}`, 0, 422, "", 0, true, 1},
		{"other tenant", "globex", `{"a":1}`, 0, 200, "note 2", 1, false, 2},
		{"just before expiry", "acme", `{"a":1}`, time.Hour - time.Millisecond, 200, "note 1", 0, true, 2},
		{"at expiry: executes anew", "acme", `{"a":2}`, time.Millisecond, 200, "note 3", 1, false, 3},
		{"the new record, cached", "acme", `{"a":2}`, 0, 200, "note 3", 0, true, 3},
	}
	for _, tt := range tests {
		now = now.Add(tt.advance)
		w, obs := send(tt.tenant, "k", tt.body)
		if w.Code != tt.wantStatus || (tt.wantBody != "" && w.Body.String() != tt.wantBody) {
			t.Errorf("%s: %d %q, want %d %q", tt.name, w.Code, w.Body, tt.wantStatus, tt.wantBody)
		}
		if obs.StoreCalls != tt.wantStoreCalls || obs.CacheHit != tt.wantCacheHit {
			t.Errorf("%s: %d store calls, cache hit %v; want %d, %v", tt.name, obs.StoreCalls, obs.CacheHit, tt.wantStoreCalls, tt.wantCacheHit)
		}
		if executions != tt.wantExecutions {
			t.Errorf("%s: %d executions, want %d", tt.name, executions, tt.wantExecutions)
		}
		if tt.wantCacheHit && tt.wantStatus == 200 && w.Header().Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("%s: a cached replay without %s", tt.name, idempotency.ReplayedHeader)
		}
	}
}

// TestCacheBounds: the cache keeps at most its entries and bytes.
func TestCacheBounds(t *testing.T) {
	for _, tt := range []struct {
		name     string
		entries  int
		bytes    int64
		wantMost int
	}{
		{"entries", 3, 1 << 20, 3},
		{"bytes", 100, 5_000, 2}, // records of about 2,300 bytes
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := idempotency.NewCache(tt.entries, tt.bytes)
			mw, _ := idempotency.New(idempotency.Config{Store: memory.New(), Cache: c, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			h := mw.Atomic("POST /v1/x", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); ok {
					w.Write([]byte(strings.Repeat("x", 2000)))
				}
			}))
			for i := range 10 {
				r := httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{}`))
				r.Header.Set(idempotency.Header, fmt.Sprint(i))
				h.ServeHTTP(httptest.NewRecorder(), r)
				if c.Len() > tt.wantMost {
					t.Fatalf("after %d records: %d cached, want at most %d", i+1, c.Len(), tt.wantMost)
				}
			}
			if c.Len() != tt.wantMost {
				t.Errorf("%d cached, want %d", c.Len(), tt.wantMost)
			}
		})
	}
}

// TestCacheConcurrent races first requests and replays of 20 keys through
// one middleware with a cache of 8 (so entries come and go): every answer is
// a 200, every answer of a key is byte-identical, and each key's effect
// happens once.
func TestCacheConcurrent(t *testing.T) {
	store := memory.New()
	mw, _ := idempotency.New(idempotency.Config{Store: store, Cache: idempotency.NewCache(8, 1<<20), Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	var mu sync.Mutex
	n := 0
	h := mw.Atomic("POST /v1/x", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		mu.Lock()
		n++ // in Atomic mode duplicates run the handler; one commit wins
		id := n
		mu.Unlock()
		call.AddEffect(memory.Insert("x", call.Key().Hash, id))
		fmt.Fprintf(w, "%s:%d", call.Key().Short(), id)
	}))
	const keys, workers, rounds = 20, 8, 50
	answers := make([]sync.Map, keys)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				k := (w + i) % keys
				r := httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{}`))
				r.Header.Set(idempotency.Header, fmt.Sprint(k))
				rw := httptest.NewRecorder()
				h.ServeHTTP(rw, r)
				if rw.Code != http.StatusOK {
					// The losers of a race on a key find the winner's
					// commit and replay it: nothing else is an answer.
					t.Errorf("key %d: %d %q, want 200", k, rw.Code, rw.Body)
					continue
				}
				if prev, loaded := answers[k].LoadOrStore("body", rw.Body.String()); loaded && prev != rw.Body.String() {
					t.Errorf("key %d: answers %q and %q", k, prev, rw.Body.String())
				}
			}
		}()
	}
	wg.Wait()
	if got := len(store.Items("x")); got != keys {
		t.Errorf("%d effects, want %d", got, keys)
	}
}

// failingStore is a memory store whose completing writes (Commit and
// Complete) fail as an unreachable DynamoDB does, while failing is set.
type failingStore struct {
	*memory.Store
	failing bool
}

func (s *failingStore) Commit(ctx context.Context, rec idempotency.Record, effects []idempotency.Effect, now time.Time) error {
	if s.failing {
		return fmt.Errorf("failing store: commit: %w", idempotency.ErrUnavailable)
	}
	return s.Store.Commit(ctx, rec, effects, now)
}

func (s *failingStore) Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error {
	if s.failing {
		return fmt.Errorf("failing store: complete: %w", idempotency.ErrUnavailable)
	}
	return s.Store.Complete(ctx, rec, lease, effects)
}

// TestCacheHoldsOnlyStoredAnswers: an answer whose completing write failed
// (503) never enters the cache, so that a retry is not answered from memory
// with a record the store does not have: it executes again (Atomic), or
// meets the reservation (Leased).
func TestCacheHoldsOnlyStoredAnswers(t *testing.T) {
	tests := []struct {
		mode       idempotency.Mode
		wantRetry  int
		wantExecs  int
		wantCached int
	}{
		{idempotency.Atomic, http.StatusOK, 2, 1},
		{idempotency.Leased, http.StatusConflict, 1, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.mode), func(t *testing.T) {
			store := &failingStore{Store: memory.New(), failing: true}
			cache := idempotency.NewCache(100, 1<<20)
			mw, err := idempotency.New(idempotency.Config{Store: store, Cache: cache, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if err != nil {
				t.Fatal(err)
			}
			execs := 0
			h := mw.Wrap(tt.mode, "POST /v1/x", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); ok {
					execs++
					fmt.Fprintf(w, "answer %d", execs)
				}
			}))
			send := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/v1/x", strings.NewReader(`{}`))
				r.Header.Set(idempotency.Header, "k")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			if w := send(); w.Code != http.StatusServiceUnavailable {
				t.Fatalf("first request, its write failing: %d %q, want 503", w.Code, w.Body)
			}
			if got := cache.Len(); got != 0 {
				t.Fatalf("after a failed write: %d cached, want 0", got)
			}
			store.failing = false
			w := send()
			if w.Code != tt.wantRetry || w.Header().Get(idempotency.ReplayedHeader) != "" {
				t.Errorf("retry: %d %q (%s: %q), want %d, not a replay", w.Code, w.Body, idempotency.ReplayedHeader, w.Header().Get(idempotency.ReplayedHeader), tt.wantRetry)
			}
			if execs != tt.wantExecs || cache.Len() != tt.wantCached {
				t.Errorf("after the retry: %d executions, %d cached; want %d, %d", execs, cache.Len(), tt.wantExecs, tt.wantCached)
			}
		})
	}
}

// TestCacheExpiryToTheMillisecond: stores keep a record's expiry to the
// millisecond, so a record committed at a clock with sub-millisecond
// digits expires in the store up to a millisecond before its unrounded
// expiry. The cache must not outlive the stored record: in that last
// millisecond the key counts as absent and a request executes anew.
func TestCacheExpiryToTheMillisecond(t *testing.T) {
	start := time.Unix(1_800_000_000, 700_000) // 0.7 ms past a millisecond
	now := start
	mw, err := idempotency.New(idempotency.Config{
		Store: memory.New(), Cache: idempotency.NewCache(10, 1<<20), Retention: time.Hour,
		Now:    func() time.Time { return now },
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	executions := 0
	h := mw.Atomic("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); ok {
			executions++
			fmt.Fprintf(w, "note %d", executions)
		}
	}))
	send := func() (*httptest.ResponseRecorder, idempotency.Observation) {
		var obs idempotency.Observation
		r := httptest.NewRequest("POST", "/v1/notes", strings.NewReader(`{}`))
		r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
		r.Header.Set(idempotency.Header, "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w, obs
	}
	send()
	// The stored record expired at start + 1h truncated to the millisecond.
	now = start.Add(time.Hour - 300*time.Microsecond)
	w, obs := send()
	if obs.CacheHit || w.Body.String() != "note 2" {
		t.Errorf("a request after the stored expiry: %q, cache hit %v; want %q, executed anew", w.Body, obs.CacheHit, "note 2")
	}
}

// TestCacheSharedByMiddlewares: one Cache serving two Middlewares over two
// stores keeps each one's records apart: a key completed through one is
// neither replayed nor refused by the other, whose store has no record of
// it, and each replays its own from the cache.
func TestCacheSharedByMiddlewares(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	cache := idempotency.NewCache(100, 1<<20)
	type side struct {
		h    http.Handler
		runs int
	}
	newSide := func(name string) *side {
		s := &side{}
		mw, err := idempotency.New(idempotency.Config{
			Store: memory.New(), Cache: cache, Retention: time.Hour, Now: func() time.Time { return now },
			Tenant: func(r *http.Request) (string, bool) { return "acme", true },
		})
		if err != nil {
			t.Fatal(err)
		}
		s.h = mw.Atomic("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := idempotency.Begin(w, r); !ok {
				return
			}
			s.runs++
			fmt.Fprintf(w, "%s note %d", name, s.runs)
		}))
		return s
	}
	a, b := newSide("A"), newSide("B")
	send := func(s *side, body string) (*httptest.ResponseRecorder, idempotency.Observation) {
		var obs idempotency.Observation
		r := httptest.NewRequest("POST", "/v1/notes", strings.NewReader(body))
		r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
		r.Header.Set(idempotency.Header, "k")
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, r)
		return w, obs
	}
	tests := []struct {
		name       string
		side       *side
		body       string
		wantStatus int
		wantBody   string
		wantHit    bool
	}{
		{"A executes", a, `{"a":1}`, 200, "A note 1", false},
		{"B executes: A's record is not B's", b, `{"a":1}`, 200, "B note 1", false},
		{"A replays its own", a, `{"a":1}`, 200, "A note 1", true},
		{"B replays its own", b, `{"a":1}`, 200, "B note 1", true},
		{"A refuses another body", a, `{"a":2}`, 422, "", true},
	}
	for _, tt := range tests {
		w, obs := send(tt.side, tt.body)
		if w.Code != tt.wantStatus || tt.wantBody != "" && w.Body.String() != tt.wantBody || obs.CacheHit != tt.wantHit {
			t.Errorf("%s: %d %q, cache hit %v; want %d %q, %v", tt.name, w.Code, w.Body, obs.CacheHit, tt.wantStatus, tt.wantBody, tt.wantHit)
		}
	}
	if a.runs != 1 || b.runs != 1 {
		t.Errorf("handlers ran A %d, B %d times; want 1 each", a.runs, b.runs)
	}
	if n := cache.Len(); n != 2 {
		t.Errorf("cache.Len() = %d, want 2 (one entry per Middleware)", n)
	}
}
