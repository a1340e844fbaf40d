package dynamo_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamotest"
)

// clock is a settable Config.Now, safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// markCounter is a Store that counts the MarkUnknown writes that landed.
type markCounter struct {
	idempotency.Store
	marks atomic.Int32
}

func (s *markCounter) MarkUnknown(ctx context.Context, key idempotency.Key, lease, newLease string, expiresAt, now time.Time) error {
	err := s.Store.MarkUnknown(ctx, key, lease, newLease, expiresAt, now)
	if err == nil {
		s.marks.Add(1)
	}
	return err
}

// TestExpiredUnknownNeverRunsAgain: a record UNKNOWN past its retention (the
// other system may have taken the request's effect) is not a free key. Retries
// racing each other, from every goroutine, get 409 with Retry-After and run
// the handler 0 times; the first retry UnknownRedrive after the record
// became UNKNOWN hands it to the reconciler again (a new lease token),
// exactly one of the racing retries, and so does a retry a minute later.
// Each redrive keeps the record at least the retention from then: its
// expiry moves to the redrive + retention (never back). It never carries a
// TTL attribute, so that DynamoDB's TTL does not delete a record that is
// being reconciled and retried, which would free its key for a second
// execution.
func TestExpiredUnknownNeverRunsAgain(t *testing.T) {
	dynamoStore, client, names := newStore(t)
	store := &markCounter{Store: dynamoStore}
	// The fake clock starts at the real time, so that the TTL attribute
	// DynamoDB Local sees is in the future and it never deletes the record:
	// only the middleware's (and the conditions') now moves.
	clk := &clock{now: time.Now()}
	const retention = time.Hour
	mw, err := idempotency.New(idempotency.Config{
		Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true },
		Retention: retention, Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32 // the calls that may have charged
	h := mw.External("POST /v1/charges", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		effects.Add(1)
		call.Unknown() // the provider's answer was lost
		w.WriteHeader(http.StatusGatewayTimeout)
	}), unresolved(t))
	const body = `{"amount":1500}`
	key := idempotency.NewKey("acme", t.Name())

	if w, _ := post(h, t.Name(), body); w.Code != http.StatusGatewayTimeout {
		t.Fatalf("first request = %d %s, want 504", w.Code, w.Body)
	}
	first, err := store.Get(t.Context(), key)
	if err != nil || first.Status != idempotency.StatusUnknown {
		t.Fatalf("record after the first request: %s, %v; want UNKNOWN", first.Status, err)
	}

	// race sends n retries at once and checks that each is 409 with
	// Retry-After, that the handler never ran, and that redrives of them
	// handed the record to the reconciler again (a MarkUnknown that landed).
	race := func(t *testing.T, n int, redrives int32) {
		t.Helper()
		store.marks.Store(0)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range n {
			wg.Go(func() {
				w, obs := post(h, t.Name(), body)
				mu.Lock()
				defer mu.Unlock()
				if w.Code != http.StatusConflict || w.Header().Get("Retry-After") == "" {
					t.Errorf("retry = %d %s (Retry-After %q), want 409 with Retry-After", w.Code, w.Body, w.Header().Get("Retry-After"))
				}
				if obs.Outcome != idempotency.OutcomeInProgress {
					t.Errorf("retry outcome = %s, want %s", obs.Outcome, idempotency.OutcomeInProgress)
				}
				if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || s < 1 {
					t.Errorf("Retry-After = %q, want whole seconds", w.Header().Get("Retry-After"))
				}
			})
		}
		wg.Wait()
		if got := effects.Load(); got != 1 {
			t.Fatalf("handler ran %d times in all, want 1 (the first request only)", got)
		}
		if got := store.marks.Load(); got != redrives {
			t.Errorf("%d of %d racing retries handed the record to the reconciler again, want %d", got, n, redrives)
		}
	}
	// lease returns the UNKNOWN record, checking that its expiry is
	// expires and that it has no TTL attribute.
	lease := func(expires time.Time) idempotency.Record {
		t.Helper()
		rec, err := store.Get(t.Context(), key)
		if err != nil || rec.Status != idempotency.StatusUnknown {
			t.Fatalf("record: %s, %v; want UNKNOWN", rec.Status, err)
		}
		expires = expires.Truncate(time.Millisecond)
		if !rec.ExpiresAt.Equal(expires) {
			t.Errorf("expiry = %v, want %v", rec.ExpiresAt, expires)
		}
		item := dynamotest.Item(t, client, names.ByLogicalID["IdempotencyTable"], key.ID())
		if ttl, ok := item[dynamo.AttrExpiresAt]; ok {
			t.Errorf("%s = %s on the UNKNOWN record, want none", dynamo.AttrExpiresAt, attrText(ttl))
		}
		return rec
	}

	// Past the retention, long past UnknownRedrive: one retry of the race
	// re-announces the record, and keeps it a retention from then; every
	// retry gets 409.
	clk.advance(retention + time.Hour)
	race(t, 8, 1)
	second := lease(clk.Now().Add(retention))
	if second.LeaseToken == first.LeaseToken {
		t.Errorf("lease token kept %q: no retry handed the expired UNKNOWN record to the reconciler again", first.LeaseToken)
	}
	if !second.UpdatedAt.Equal(clk.Now().Truncate(time.Millisecond)) {
		t.Errorf("updated at %v, want %v (the redrive)", second.UpdatedAt, clk.Now())
	}

	// Within a minute of that redrive: 409, no redrive, the expiry as the
	// redrive left it.
	clk.advance(30 * time.Second)
	race(t, 4, 0)
	if got := lease(second.ExpiresAt); got.LeaseToken != second.LeaseToken {
		t.Errorf("lease token changed within UnknownRedrive of the last redrive: %q -> %q", second.LeaseToken, got.LeaseToken)
	}

	// A minute after it: redriven again, still 409, still never run, kept a
	// retention from this redrive.
	clk.advance(31 * time.Second)
	race(t, 4, 1)
	third := lease(clk.Now().Add(retention))
	if third.LeaseToken == second.LeaseToken {
		t.Errorf("lease token kept %q a minute after the last redrive: the record was not handed to the reconciler again", second.LeaseToken)
	}

	// A record kept longer than a retention from now (by an operator's
	// reannounce with a longer retention, say) keeps its expiry: a redrive
	// extends it, never shortens it.
	later := clk.Now().Add(10 * retention)
	if err := dynamoStore.MarkUnknown(t.Context(), key, third.LeaseToken, idempotency.NewToken(), later, clk.Now()); err != nil {
		t.Fatalf("MarkUnknown(kept longer): %v", err)
	}
	clk.advance(61 * time.Second)
	race(t, 4, 1)
	lease(later)
}
