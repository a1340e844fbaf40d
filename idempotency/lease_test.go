package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

// TestLeaseShorterThanDeadlineWarns: a request whose context's deadline
// leaves it longer to run than its lease (less LeaseMargin) is served, and
// the Middleware logs one structured warning, naming the route, the lease
// and the time left, never the key; later requests log nothing more. A
// deadline the lease covers, no deadline, and Atomic mode (no lease held
// while the handler runs) log nothing.
func TestLeaseShorterThanDeadlineWarns(t *testing.T) {
	tests := []struct {
		name     string
		mode     idempotency.Mode
		lease    time.Duration
		deadline time.Duration // from now; 0: none
		want     int           // warnings after three requests
	}{
		{"leased, deadline past the lease", idempotency.Leased, 2 * time.Second, time.Hour, 1},
		{"external, deadline past the lease", idempotency.External, 2 * time.Second, time.Hour, 1},
		{"within the margin", idempotency.Leased, 10 * time.Second, 10*time.Second - idempotency.LeaseMargin/2, 1},
		{"covered by the lease", idempotency.Leased, idempotency.DefaultLease, 10 * time.Second, 0},
		{"no deadline", idempotency.Leased, 2 * time.Second, 0, 0},
		{"atomic", idempotency.Atomic, 2 * time.Second, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			mw, err := idempotency.New(idempotency.Config{
				Store:  memory.New(),
				Tenant: func(*http.Request) (string, bool) { return "acme", true },
				Lease:  tt.lease,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			h := wrap(mw, tt.mode, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); !ok {
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			for _, key := range []string{"secret-key-1", "secret-key-2", "secret-key-3"} {
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				r := httptest.NewRequestWithContext(ctx, "POST", "/v1/things", strings.NewReader(`{}`))
				r.Header.Set(idempotency.Header, key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusCreated {
					t.Fatalf("status = %d %s, want 201 (served, whatever the lease)", w.Code, w.Body)
				}
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if logs.Len() == 0 {
				lines = nil
			}
			if len(lines) != tt.want {
				t.Fatalf("%d log lines, want %d:\n%s", len(lines), tt.want, logs.String())
			}
			if tt.want == 0 {
				return
			}
			if strings.Contains(logs.String(), "secret-key") {
				t.Errorf("the warning holds an idempotency key: %s", logs.String())
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatalf("log line %q: %v", lines[0], err)
			}
			delete(got, "time")
			delete(got, "msg")
			deadlineIn, _ := got["deadline_in"].(string)
			delete(got, "deadline_in")
			want := map[string]any{"level": "WARN", "route": "POST /v1/things", "lease": tt.lease.String(), "lease_margin": idempotency.LeaseMargin.String()}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("warning mismatch (-want +got):\n%s", diff)
			}
			if d, err := time.ParseDuration(deadlineIn); err != nil || d <= 0 || d > tt.deadline {
				t.Errorf("deadline_in = %q, want the time left before the deadline (at most %v)", deadlineIn, tt.deadline)
			}
		})
	}
}

// TestLateCompletionAfterTakeover: a Leased request that outlives its lease
// (a zombie) while another request takes its key over and completes it
// stores nothing: its completion is fenced on its lease token, so its
// effects are not written and the newer answer stays. Its client is
// answered from the key's state, never with another request's answer: the
// newer answer, replayed, when that request was the same one (same
// fingerprint), and 409 in progress (Retry-After: UnknownRetryAfter) when it
// was another, whose answer the zombie's retry then never gets either (422).
// On each store.
func TestLateCompletionAfterTakeover(t *testing.T) {
	tests := []struct {
		name        string
		zombieBody  string
		takeover    string
		wantStatus  int
		wantBody    string // the zombie's answer; "": the in-progress problem
		wantOutcome string
		wantRetry   int // the zombie's retry's status
	}{
		{"same request", `{"n":1}`, `{"n": 1}`, http.StatusCreated, "answer-B", idempotency.OutcomeReplayed, http.StatusCreated},
		{"another request", `{"n":1}`, `{"n":2}`, http.StatusConflict, "", idempotency.OutcomeFenced, http.StatusUnprocessableEntity},
	}
	eachStore(t, func(t *testing.T, s testStore) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var mu sync.Mutex
				now := time.Unix(1_800_000_000, 0)
				clock := func() time.Time {
					mu.Lock()
					defer mu.Unlock()
					return now
				}
				mw, err := idempotency.New(idempotency.Config{
					Store: s, Now: clock, Lease: 10 * time.Second,
					Tenant: func(*http.Request) (string, bool) { return "acme", true },
				})
				if err != nil {
					t.Fatal(err)
				}
				inside, release := make(chan struct{}), make(chan struct{})
				entered, unblock := sync.OnceFunc(func() { close(inside) }), sync.OnceFunc(func() { close(release) })
				defer unblock()
				h := mw.Leased("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					call, ok := idempotency.Begin(w, r)
					if !ok {
						return
					}
					which := r.Header.Get("X-Which")
					call.AddEffect(s.insert(t.Name() + "-" + which))
					if which == "A" {
						entered()
						<-release
					}
					w.WriteHeader(http.StatusCreated)
					fmt.Fprint(w, "answer-"+which)
				}))
				send := func(which, body string) (*httptest.ResponseRecorder, idempotency.Observation) {
					var obs idempotency.Observation
					r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(body))
					r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
					r.Header.Set(idempotency.Header, t.Name())
					r.Header.Set("X-Which", which)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w, obs
				}
				type answer struct {
					w   *httptest.ResponseRecorder
					obs idempotency.Observation
				}
				zombie := make(chan answer, 1)
				go func() {
					w, obs := send("A", tt.zombieBody)
					zombie <- answer{w, obs}
				}()
				select {
				case <-inside:
				case a := <-zombie:
					t.Fatalf("request A = %d %q (%s), want it held inside its handler", a.w.Code, a.w.Body, a.obs.Outcome)
				}
				mu.Lock()
				now = now.Add(time.Minute) // A's lease has run out
				mu.Unlock()
				if b, obs := send("B", tt.takeover); b.Code != http.StatusCreated || b.Body.String() != "answer-B" {
					t.Fatalf("takeover = %d %q (%s), want 201 answer-B", b.Code, b.Body, obs.Outcome)
				}
				unblock()
				a := <-zombie

				if a.w.Code != tt.wantStatus || a.obs.Outcome != tt.wantOutcome {
					t.Errorf("zombie = %d %q (%s), want %d (%s)", a.w.Code, a.w.Body, a.obs.Outcome, tt.wantStatus, tt.wantOutcome)
				}
				switch tt.wantBody {
				case "":
					if strings.Contains(a.w.Body.String(), "answer-") || !strings.Contains(a.w.Body.String(), `"code":"idempotency_request_in_progress"`) ||
						a.w.Header().Get("Retry-After") != "2" || a.w.Header().Get(idempotency.ReplayedHeader) != "" {
						t.Errorf("zombie = %d %q (Retry-After %q, replayed %q), want the in-progress problem, Retry-After 2, not another request's answer",
							a.w.Code, a.w.Body, a.w.Header().Get("Retry-After"), a.w.Header().Get(idempotency.ReplayedHeader))
					}
				default:
					if a.w.Body.String() != tt.wantBody || a.w.Header().Get(idempotency.ReplayedHeader) != "true" {
						t.Errorf("zombie = %d %q (replayed %q), want %q replayed", a.w.Code, a.w.Body, a.w.Header().Get(idempotency.ReplayedHeader), tt.wantBody)
					}
				}
				rec, err := s.Get(t.Context(), idempotency.NewKey("acme", t.Name()))
				if err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil || string(rec.Response.Body) != "answer-B" {
					t.Errorf("record = %s %s (err %v), want COMPLETED with answer-B", rec.Status, answerOf(rec), err)
				}
				if s.inserted(t, t.Name()+"-A") || !s.inserted(t, t.Name()+"-B") {
					t.Errorf("effects written: zombie's %v, takeover's %v; want only the takeover's", s.inserted(t, t.Name()+"-A"), s.inserted(t, t.Name()+"-B"))
				}
				if retry, _ := send("A", tt.zombieBody); retry.Code != tt.wantRetry || tt.wantBody == "" && strings.Contains(retry.Body.String(), "answer-") {
					t.Errorf("zombie's retry = %d %q, want %d", retry.Code, retry.Body, tt.wantRetry)
				}
			})
		}
	})
}

// completeDeadline is a Store that notes how long the context of each
// Complete has left to run.
type completeDeadline struct {
	idempotency.Store
	mu   sync.Mutex
	left []time.Duration
}

func (s *completeDeadline) Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error {
	if d, ok := ctx.Deadline(); ok {
		s.mu.Lock()
		s.left = append(s.left, time.Until(d))
		s.mu.Unlock()
	}
	return s.Store.Complete(ctx, rec, lease, effects)
}

// TestCompletionTimeoutDefault: CompletionTimeout unset is
// DefaultCompletionTimeout or half the Lease, whichever is shorter, so a
// short Lease never gets a default New would refuse if it were set; a value
// set is kept, and one not shorter than the Lease is refused.
func TestCompletionTimeoutDefault(t *testing.T) {
	tests := []struct {
		name              string
		lease, completion time.Duration
		want              time.Duration // the completion's bound; 0: New refuses
	}{
		{"defaults", 0, 0, idempotency.DefaultCompletionTimeout},
		{"a long lease keeps the default", 5 * time.Minute, 0, idempotency.DefaultCompletionTimeout},
		{"a short lease halves it", 2 * time.Second, 0, time.Second},
		{"a lease at twice the default", 2 * idempotency.DefaultCompletionTimeout, 0, idempotency.DefaultCompletionTimeout},
		{"set, shorter than the lease", 2 * time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"set, as long as the lease", 2 * time.Second, 2 * time.Second, 0},
		{"set, longer than the default lease", 0, 31 * time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &completeDeadline{Store: memory.New()}
			mw, err := idempotency.New(idempotency.Config{
				Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true },
				Lease: tt.lease, CompletionTimeout: tt.completion,
			})
			if tt.want == 0 {
				if !errors.Is(err, idempotency.ErrCompletionTimeoutLong) {
					t.Fatalf("New(Lease %v, CompletionTimeout %v) = %v, want ErrCompletionTimeoutLong", tt.lease, tt.completion, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(Lease %v, CompletionTimeout %v) = %v, want no error", tt.lease, tt.completion, err)
			}
			h := mw.Leased("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); ok {
					w.WriteHeader(http.StatusCreated)
				}
			}))
			r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(`{}`))
			r.Header.Set(idempotency.Header, "k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated || len(store.left) != 1 {
				t.Fatalf("status %d, %d completions; want 201 and one", w.Code, len(store.left))
			}
			if got := store.left[0]; got > tt.want || got < tt.want-time.Second/4 {
				t.Errorf("the completion's context had %v left, want %v (the CompletionTimeout in force)", got, tt.want)
			}
		})
	}
}

// TestPanicAfterBegin: a handler that panics after Begin, served by
// net/http (which recovers the panic and drops the connection), leaves no
// answer stored and none of its effects. In Atomic mode nothing at all
// was written, so a retry executes at once. A Leased or External
// reservation stays IN_PROGRESS until its lease runs out, a retry within it
// answered 409 with Retry-After; after it a Leased retry takes the key over
// and executes, while an External one, whose call out may have landed,
// hands the record to reconciliation (UNKNOWN) and is answered 409 too.
func TestPanicAfterBegin(t *testing.T) {
	const lease = 10 * time.Second
	tests := []struct {
		mode         idempotency.Mode
		wantStatus   idempotency.Status // after the panic; "": no record
		wantInLease  int                // a retry within the lease
		wantAfter    int                // a retry after it
		wantAfterRec idempotency.Status
	}{
		{idempotency.Atomic, "", http.StatusCreated, http.StatusCreated, idempotency.StatusCompleted},
		{idempotency.Leased, idempotency.StatusInProgress, http.StatusConflict, http.StatusCreated, idempotency.StatusCompleted},
		{idempotency.External, idempotency.StatusInProgress, http.StatusConflict, http.StatusConflict, idempotency.StatusUnknown},
	}
	eachStore(t, func(t *testing.T, s testStore) {
		for _, tt := range tests {
			t.Run(tt.mode.String(), func(t *testing.T) {
				var mu sync.Mutex
				now := time.Now()
				clock := func() time.Time {
					mu.Lock()
					defer mu.Unlock()
					return now
				}
				mw, err := idempotency.New(idempotency.Config{
					Store: s, Now: clock, Lease: lease,
					Tenant: func(*http.Request) (string, bool) { return "acme", true },
				})
				if err != nil {
					t.Fatal(err)
				}
				attempt := 0
				h := wrap(mw, tt.mode, "POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					call, ok := idempotency.Begin(w, r)
					if !ok {
						return
					}
					attempt++
					id := fmt.Sprintf("%s-%d", t.Name(), attempt)
					call.AddEffect(s.insert(id))
					if attempt == 1 {
						panic("the handler failed after Begin")
					}
					w.WriteHeader(http.StatusCreated)
					fmt.Fprint(w, id)
				}))
				srv := httptest.NewUnstartedServer(h)
				srv.Config.ErrorLog = log.New(io.Discard, "", 0) // net/http logs the recovered panic
				srv.Start()
				defer srv.Close()
				send := func() (int, string) {
					t.Helper()
					r, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/things", strings.NewReader(`{}`))
					r.Header.Set(idempotency.Header, t.Name())
					resp, err := srv.Client().Do(r)
					if err != nil {
						return 0, err.Error()
					}
					defer resp.Body.Close()
					body, _ := io.ReadAll(resp.Body)
					return resp.StatusCode, resp.Header.Get("Retry-After") + " " + string(body)
				}
				key := idempotency.NewKey("acme", t.Name())
				status := func() idempotency.Status {
					rec, err := s.Get(t.Context(), key)
					if errors.Is(err, idempotency.ErrNotFound) {
						return ""
					} else if err != nil {
						t.Fatal(err)
					}
					return rec.Status
				}

				if code, body := send(); code != 0 {
					t.Fatalf("the panicking request = %d %q, want the connection dropped", code, body)
				}
				if got := status(); got != tt.wantStatus {
					t.Errorf("after the panic: record %q, want %q", got, tt.wantStatus)
				}
				if s.inserted(t, t.Name()+"-1") {
					t.Error("the panicking attempt's effect was written")
				}
				// A 409's Retry-After is what is left of the lease (the clock
				// stands still).
				if code, body := send(); code != tt.wantInLease || code == http.StatusConflict && !strings.HasPrefix(body, "10 ") {
					t.Errorf("a retry within the lease = %d %q, want %d (a 409 with Retry-After 10)", code, body, tt.wantInLease)
				}
				mu.Lock()
				now = now.Add(lease + time.Second)
				mu.Unlock()
				if code, body := send(); code != tt.wantAfter {
					t.Errorf("a retry after the lease = %d %q, want %d", code, body, tt.wantAfter)
				}
				if got := status(); got != tt.wantAfterRec {
					t.Errorf("after the lease's retry: record %q, want %q", got, tt.wantAfterRec)
				}
				if s.inserted(t, t.Name()+"-1") {
					t.Error("the panicking attempt's effect was written")
				}
			})
		}
	})
}
