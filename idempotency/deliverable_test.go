package idempotency_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

// TestDeliverable: an answer Config.Deliverable refuses is refused as one
// over the store's limits, before anything is written: 500
// response_too_large, whatever error Deliverable returns; Atomic and Leased
// commit no effect and hold nothing (a retry executes again), External,
// which has called out, stores the problem with its effects. Without
// Deliverable, nothing but the store limits an answer.
func TestDeliverable(t *testing.T) {
	small := strings.Repeat("x", 100)
	big := strings.Repeat("x", 1000)
	refuse := func(resp idempotency.Response) error {
		if len(resp.Body) > 500 {
			return errors.New("over the transport's limit") // matches no sentinel
		}
		return nil
	}
	tests := []struct {
		name        string
		mode        idempotency.Mode
		deliverable func(idempotency.Response) error
		body        string
		wantStatus  int
		wantOutcome string
		wantStored  bool // COMPLETED, answering wantStatus
		wantEffect  bool
		wantRuns    int // after the retry (an Atomic retry runs the handler before its commit finds the record)
	}{
		{"Atomic, refused", idempotency.Atomic, refuse, big, 500, idempotency.OutcomeStoreError, false, false, 2},
		{"Leased, refused", idempotency.Leased, refuse, big, 500, idempotency.OutcomeStoreError, false, false, 2},
		{"External, refused", idempotency.External, refuse, big, 500, idempotency.OutcomeStoreError, true, true, 1},
		{"Atomic, deliverable", idempotency.Atomic, refuse, small, 201, idempotency.OutcomeCreated, true, true, 2},
		{"External, deliverable", idempotency.External, refuse, small, 201, idempotency.OutcomeCreated, true, true, 1},
		{"Atomic, no Deliverable", idempotency.Atomic, nil, big, 201, idempotency.OutcomeCreated, true, true, 2},
		{"Leased, no Deliverable", idempotency.Leased, nil, big, 201, idempotency.OutcomeCreated, true, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{
				Store:       store,
				Tenant:      func(*http.Request) (string, bool) { return "acme", true },
				Deliverable: tt.deliverable,
				Logger:      slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			key := idempotency.NewKey("acme", "k")
			runs := 0
			h := wrap(mw, tt.mode, "POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				runs++
				call.AddEffect(memory.Insert("notes", key.ID(), "note"))
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, tt.body)
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
			w, obs := send()
			if w.Code != tt.wantStatus || obs.Outcome != tt.wantOutcome {
				t.Errorf("answer = %d, outcome %s; want %d, %s", w.Code, obs.Outcome, tt.wantStatus, tt.wantOutcome)
			}
			if tt.wantStatus == 500 && (!strings.Contains(w.Body.String(), `"response_too_large"`) || !strings.Contains(obs.Err, "over the transport's limit")) {
				t.Errorf("answer %s, observation's error %q; want response_too_large, saying why", w.Body, obs.Err)
			}
			rec, err := store.Get(t.Context(), key)
			switch {
			case tt.wantStored && (err != nil || rec.Status != idempotency.StatusCompleted || rec.Response.Status != tt.wantStatus):
				t.Errorf("record = %s %v (%v), want COMPLETED with %d", rec.Status, rec.Response, err, tt.wantStatus)
			case !tt.wantStored && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("record = %s (%v), want none", rec.Status, err)
			}
			if _, got := store.Items("notes")[key.ID()]; got != tt.wantEffect {
				t.Errorf("effect committed: %v, want %v", got, tt.wantEffect)
			}
			again, _ := send()
			if again.Code != tt.wantStatus || (again.Header().Get(idempotency.ReplayedHeader) == "true") != tt.wantStored {
				t.Errorf("retry = %d, replayed %q; want %d, replayed %v", again.Code, again.Header().Get(idempotency.ReplayedHeader), tt.wantStatus, tt.wantStored)
			}
			if runs != tt.wantRuns {
				t.Errorf("handler ran %d times, want %d", runs, tt.wantRuns)
			}
		})
	}
}
