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
		{"denied commit, hook installed", idempotency.Atomic, func() *brokenStore { return &brokenStore{Store: memory.New(), commitErr: denied} },
			0, false, true, http.StatusInternalServerError, "", idempotency.OutcomeStoreError, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			store := tt.store()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader,
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
			r := httptest.NewRequest("POST", "/v1/notes", strings.NewReader(`{"text":"secret body"}`))
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
