package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

// brokenStore is a memory store whose writes after the handler fail as
// configured: Commit with commitErr, Release with releaseErr, or Complete with
// ErrResponseTooLarge whenever it carries effects (effects too large for
// one write of the store).
type brokenStore struct {
	*memory.Store
	commitErr     error
	releaseErr    error
	effectsTooBig bool
}

func (s *brokenStore) Release(ctx context.Context, key idempotency.Key, lease string, effects []idempotency.Effect) error {
	if s.releaseErr != nil {
		return s.releaseErr
	}
	return s.Store.Release(ctx, key, lease, effects)
}

func (s *brokenStore) Commit(ctx context.Context, rec idempotency.Record, effects []idempotency.Effect, now time.Time) error {
	if s.commitErr != nil {
		return s.commitErr
	}
	return s.Store.Commit(ctx, rec, effects, now)
}

func (s *brokenStore) Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error {
	if s.effectsTooBig && len(effects) > 0 {
		return fmt.Errorf("broken store: complete: %w", idempotency.ErrResponseTooLarge)
	}
	return s.Store.Complete(ctx, rec, lease, effects)
}

// TestOperatorLogWithoutObservation: with no observation hook installed (the
// README's wiring), an outcome an operator must see is logged to
// Config.Logger, one JSON line with the route, the outcome, the status, the
// key's record ID and the error, never the raw key; an outcome that needs
// nobody is not logged, nor is anything when the caller installs a hook
// (WithObservation), which then logs it itself.
func TestOperatorLogWithoutObservation(t *testing.T) {
	const rawKey = "raw-key-Zq9"
	denied := errors.New("dynamo: commit: AccessDeniedException: not authorized to perform dynamodb:PutItem")
	tests := []struct {
		name      string
		mode      idempotency.Mode
		store     func() *brokenStore
		answer    int  // the handler's status after Begin (201 when 0)
		noBegin   bool // the handler forgets Begin
		hooked    bool
		status    int
		wantLevel string // "" for no line
		wantOut   string
		wantErr   string
	}{
		{"denied commit", idempotency.Atomic, func() *brokenStore { return &brokenStore{Store: memory.New(), commitErr: denied} },
			0, false, false, http.StatusInternalServerError, "ERROR", idempotency.OutcomeStoreError, "AccessDeniedException"},
		{"unavailable commit", idempotency.Atomic, func() *brokenStore {
			return &brokenStore{Store: memory.New(), commitErr: fmt.Errorf("throttled: %w", idempotency.ErrUnavailable)}
		}, 0, false, false, http.StatusServiceUnavailable, "WARN", idempotency.OutcomeStoreError, "throttled"},
		{"effects dropped", idempotency.External, func() *brokenStore { return &brokenStore{Store: memory.New(), effectsTooBig: true} },
			0, false, false, http.StatusInternalServerError, "ERROR", idempotency.OutcomeEffectsDropped, "too large"},
		{"release failed", idempotency.Leased, func() *brokenStore { return &brokenStore{Store: memory.New(), releaseErr: denied} },
			http.StatusServiceUnavailable, false, false, http.StatusServiceUnavailable, "WARN", idempotency.OutcomeReleased, "AccessDeniedException"},
		{"forgotten Begin", idempotency.Atomic, func() *brokenStore { return &brokenStore{Store: memory.New()} },
			0, true, false, http.StatusInternalServerError, "ERROR", idempotency.OutcomeRejected, "without calling Begin"},
		{"created", idempotency.Atomic, func() *brokenStore { return &brokenStore{Store: memory.New()} },
			0, false, false, http.StatusCreated, "", idempotency.OutcomeCreated, ""},
		{"released", idempotency.Leased, func() *brokenStore { return &brokenStore{Store: memory.New()} },
			http.StatusServiceUnavailable, false, false, http.StatusServiceUnavailable, "", idempotency.OutcomeReleased, ""},
		{"a request the store cannot keep (the client's 413)", idempotency.External, func() *brokenStore { return &brokenStore{Store: memory.New()} },
			0, false, false, http.StatusRequestEntityTooLarge, "", idempotency.OutcomeStoreError, ""},
		{"denied commit, hook installed", idempotency.Atomic, func() *brokenStore { return &brokenStore{Store: memory.New(), commitErr: denied} },
			0, false, true, http.StatusInternalServerError, "", idempotency.OutcomeStoreError, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			store := tt.store()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader, MaxBody: 1 << 20,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			h := wrap(mw, tt.mode, "POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.noBegin {
					w.WriteHeader(http.StatusCreated)
					return
				}
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				call.AddEffect(memory.Insert("notes", "n1", "a note"))
				if tt.answer != 0 {
					w.WriteHeader(tt.answer)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			body := `{"text":"secret body"}`
			if tt.status == http.StatusRequestEntityTooLarge { // over dynamo.MaxRequest, under MaxBody
				body = `{"text":"secret body` + strings.Repeat("x", 310_000) + `"}`
			}
			r := httptest.NewRequest("POST", "/v1/notes", strings.NewReader(body))
			r.Header.Set("X-Tenant", "acme")
			r.Header.Set(idempotency.Header, rawKey)
			obs := &idempotency.Observation{}
			if tt.hooked {
				r = r.WithContext(idempotency.WithObservation(r.Context(), obs))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if obs.Outcome != tt.wantOut && tt.hooked {
				t.Errorf("Observation.Outcome = %q, want %q", obs.Outcome, tt.wantOut)
			}
			if w.Code != tt.status {
				t.Fatalf("status = %d %s, want %d", w.Code, w.Body, tt.status)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if logs.Len() == 0 {
				lines = nil
			}
			if tt.wantLevel == "" {
				if len(lines) != 0 {
					t.Errorf("logged %q, want nothing", lines)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("logged %d lines %q, want 1", len(lines), lines)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatalf("log line %q: %v", lines[0], err)
			}
			want := map[string]any{
				"level": tt.wantLevel, "route": "POST /v1/notes", "outcome": tt.wantOut, "status": float64(tt.status),
				"record_id": idempotency.NewKey("acme", rawKey).ID(),
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("log line's %s = %v, want %v (line %s)", k, got[k], v, lines[0])
				}
			}
			if e, _ := got["error"].(string); !strings.Contains(e, tt.wantErr) {
				t.Errorf("log line's error = %q, want it to contain %q", e, tt.wantErr)
			}
			for _, secret := range []string{rawKey, "secret body"} {
				if strings.Contains(lines[0], secret) {
					t.Errorf("log line %s contains %q", lines[0], secret)
				}
			}
		})
	}
}

// markDenied is a memory store whose MarkUnknown is denied.
type markDenied struct{ *memory.Store }

func (s *markDenied) MarkUnknown(context.Context, idempotency.Key, string, string, time.Time, time.Time) error {
	return errors.New("dynamo: mark unknown: AccessDeniedException: not authorized to perform dynamodb:UpdateItem")
}

// TestOperatorLogAbandonedHandOff: without an observation hook, a retry
// that finds an External reservation abandoned (its function crashed after
// Begin, its lease run out) and cannot hand it to reconciliation (the
// UNKNOWN write denied) answers 409 and logs one warning saying why, the
// record's ID and never the raw key.
func TestOperatorLogAbandonedHandOff(t *testing.T) {
	const rawKey = "raw-key-Zq9"
	var logs bytes.Buffer
	now := time.Now()
	clock := now
	mw, err := idempotency.New(idempotency.Config{Store: &markDenied{memory.New()}, Tenant: tenantFromHeader,
		Now: func() time.Time { return clock }, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	crash := true
	h := wrap(mw, idempotency.External, "POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		if crash {
			panic("the function crashed after its reservation")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	func() {
		defer func() { _ = recover() }()
		post(h, "acme", rawKey, `{}`)
	}()
	logs.Reset()
	crash, clock = false, now.Add(time.Hour) // the lease has run out
	if w := post(h, "acme", rawKey, `{}`); w.Code != http.StatusConflict {
		t.Fatalf("retry: %d %s, want 409", w.Code, w.Body)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if logs.Len() == 0 || len(lines) != 1 {
		t.Fatalf("logged %q, want one line", logs.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	if got["level"] != "WARN" || got["outcome"] != idempotency.OutcomeInProgress || got["record_id"] != idempotency.NewKey("acme", rawKey).ID() ||
		!strings.Contains(fmt.Sprint(got["error"]), "AccessDeniedException") || strings.Contains(lines[0], rawKey) {
		t.Errorf("log line %s: want WARN, outcome in_progress, the record ID, the denial, no raw key", lines[0])
	}
}
