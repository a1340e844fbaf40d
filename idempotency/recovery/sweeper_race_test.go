package recovery_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/provider"
)

// The Sweeper's restore of an abandoned External reservation is a stream
// record, retried when it fails and late when the stream lags: it can land
// after a newer request has used the key. It writes with Store.Reserve, so it
// takes the key exactly when a new request could: when it is absent, or when
// the record there is reclaimable (expired, and not an External reservation).
// A record within its retention, and an External reservation whatever its
// lease, are never overwritten.

// abandon writes old, a reservation whose process died, and deletes it as
// DynamoDB's TTL does. It returns the REMOVE stream record of the deletion.
func (w world) abandon(t *testing.T, old idempotency.Record) events.DynamoDBEventRecord {
	t.Helper()
	if err := w.store.Reserve(t.Context(), old, nil, old.CreatedAt); err != nil {
		t.Fatalf("Reserve(abandoned): %v", err)
	}
	img := w.image(t, old.Key)
	dynamotest.Delete(t, w.db, w.names.ByLogicalID["IdempotencyTable"], old.Key.ID())
	return lambdatest.Record(events.DynamoDBOperationTypeRemove, img, nil, lambdatest.TTLIdentity(), time.Now())
}

// failSweep delivers rec to a Sweeper whose store cannot be written (its
// table is missing): the record fails, to be delivered again, and nothing is
// restored.
func (w world) failSweep(t *testing.T, rec events.DynamoDBEventRecord) {
	t.Helper()
	broken := dynamo.New(w.db, w.names.ByLogicalID["IdempotencyTable"]+"-missing")
	if failed := newSweepHarness(t, broken, time.Now).handle(t, rec); len(failed) != 1 {
		t.Fatalf("first delivery: failures = %v, want the record (the restore failed)", failed)
	}
}

// sweepRetry delivers rec again, at sweepAt, to a Sweeper on the real store,
// and reports whether it restored the key (reconcile_scheduled), and whether
// it found the key held by another request (zombie_unrestored).
func (w world) sweepRetry(t *testing.T, rec events.DynamoDBEventRecord, sweepAt time.Time) (restored, unrestored bool) {
	t.Helper()
	h := newSweepHarness(t, w.store, func() time.Time { return sweepAt })
	if failed := h.handle(t, rec); failed != nil {
		t.Fatalf("retried delivery: failures = %v, want none", failed)
	}
	counts := lambdatest.Counts(t, h.metrics.String(), "sweeper")
	if counts["zombie_swept"] != 1 {
		t.Errorf("retried delivery: metrics %v, want zombie_swept 1", counts)
	}
	return counts["reconcile_scheduled"] == 1, counts["zombie_unrestored"] == 1
}

// requestOf is the External reservation of key for req, created at created.
func requestOf(t *testing.T, key idempotency.Key, req provider.ChargeRequest, created time.Time, lease time.Duration) idempotency.Record {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := idempotency.Canonical(body)
	if err != nil {
		t.Fatal(err)
	}
	rec := reservation(key, created, lease)
	rec.Request, rec.Fingerprint = canonical, idempotency.Fingerprint(http.MethodPost, route, canonical)
	return rec
}

// chargeRoute is the test route behind the middleware on w's store, kept for
// retention: it charges under the request's forward key and answers as
// rebuild does, so that the reconciler rebuilds the same bytes. It counts
// its executions in runs.
func (w world) chargeRoute(t *testing.T, retention time.Duration, runs *atomic.Int32) http.Handler {
	t.Helper()
	mw, err := idempotency.New(idempotency.Config{
		Store: w.store, Retention: retention,
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(rw, r)
		if !ok {
			return
		}
		runs.Add(1)
		var req provider.ChargeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		c, err := w.provider.Charge(r.Context(), call.ForwardKey(), req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := rebuild(call.Record(), c)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", resp.Header["Content-Type"])
		rw.WriteHeader(resp.Status)
		rw.Write(resp.Body)
	})
	return mw.External(route, handler, chargeResolver(w.provider, rebuild))
}

// send posts req under the raw key to h.
func send(t *testing.T, h http.Handler, raw string, req provider.ChargeRequest) *httptest.ResponseRecorder {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(string(body)))
	r.Header.Set(idempotency.Header, raw)
	r.Header.Set("Content-Type", "application/json")
	rw := httptest.NewRecorder()
	h.ServeHTTP(rw, r)
	return rw
}

// TestSweeperRetryAfterNewerRequest drives the race on DynamoDB Local: an
// External reservation that charged is abandoned and deleted by TTL; the
// Sweeper's first delivery of the REMOVE fails; a new request under the same
// key (the same request, or another) executes and is stored; the REMOVE is
// delivered again. Within the newer record's retention the restore is
// refused and the newer answer replays unchanged. After it the record counts
// as absent (a new request would execute anew), so the restore takes the
// key, and the reconciler completes it with the abandoned request's charge:
// for the same request that is the same charge and the same bytes, so the
// replay is still unchanged; for another request, the abandoned request's
// charge is recorded instead of lost, and the newer one's retry is a key
// reuse. The request executes once, and the reconciler charges nothing.
func TestSweeperRetryAfterNewerRequest(t *testing.T) {
	w := newWorld(t)
	const keep = time.Minute // the middleware's retention
	tests := []struct {
		name     string
		another  bool // the newer request is another request under the key
		late     bool // the retry comes after the newer record's retention
		restored bool
	}{
		{name: "same request, retried within its retention"},
		{name: "another request, retried within its retention", another: true},
		{name: "same request, retried after its retention", late: true, restored: true},
		{name: "another request, retried after its retention", another: true, late: true, restored: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := strings.ReplaceAll(t.Name(), " ", "-")
			key := idempotency.NewKey("acme", raw)
			oldReq, newReq := chargeRequest, chargeRequest
			if tt.another {
				oldReq.Amount = 2500
			}
			now := time.Now()
			old := requestOf(t, key, oldReq, now.Add(-2*time.Minute), 30*time.Second)
			oldCharge, err := w.provider.Charge(t.Context(), old.ForwardKey(), oldReq)
			if err != nil {
				t.Fatalf("provider Charge(abandoned): %v", err)
			}
			remove := w.abandon(t, old)
			w.failSweep(t, remove)

			var runs atomic.Int32
			h := w.chargeRoute(t, keep, &runs)
			first := send(t, h, raw, newReq)
			if first.Code != http.StatusCreated {
				t.Fatalf("newer request = %d %s, want 201 (the key was free)", first.Code, first.Body)
			}
			newer, err := w.store.Get(t.Context(), key)
			if err != nil || newer.Status != idempotency.StatusCompleted {
				t.Fatalf("newer record = %s, %v; want COMPLETED", newer.Status, err)
			}
			newerImage := w.image(t, key)

			sweepAt := time.Now()
			if tt.late {
				sweepAt = newer.ExpiresAt.Add(time.Second)
			}
			got, unrestored := w.sweepRetry(t, remove, sweepAt)
			if got != tt.restored {
				t.Fatalf("retried restore took the key: %v, want %v", got, tt.restored)
			}
			// The newer record is a new reservation, the same request's
			// (retried) or another's: either way the abandoned request's
			// outcome is left unreconciled while the key ran again.
			if want := !tt.restored; unrestored != want {
				t.Errorf("zombie_unrestored counted: %v, want %v (whenever a new reservation holds the key)", unrestored, want)
			}
			if got := newer.Reclaimable(sweepAt); got != tt.restored {
				t.Errorf("newer record reclaimable by a new request at the retry: %v, want %v (the restore takes the key exactly when one could)", got, tt.restored)
			}

			if !tt.restored {
				if got, err := w.store.Get(t.Context(), key); err != nil || !cmp.Equal(newer, got) {
					t.Errorf("after the retried restore: Get() = %+v, %v; want the newer record unchanged", got, err)
				}
			} else {
				got, err := w.store.Get(t.Context(), key)
				if err != nil || got.Status != idempotency.StatusUnknown || got.Fingerprint != old.Fingerprint ||
					!got.CreatedAt.Equal(old.CreatedAt.Truncate(time.Millisecond)) {
					t.Fatalf("after the retried restore: Get() = %+v, %v; want the abandoned request UNKNOWN", got, err)
				}
				rh := newHarness(t, config{Store: w.store, Provider: w.provider})
				modify := lambdatest.Record(events.DynamoDBOperationTypeModify, newerImage, w.image(t, key), nil, time.Now())
				if failed := rh.handle(t.Context(), t, modify); failed != nil {
					t.Fatalf("reconcile: failures = %v, want none", failed)
				}
				done, err := w.store.Get(t.Context(), key)
				if err != nil || done.Status != idempotency.StatusCompleted || done.Fingerprint != old.Fingerprint {
					t.Fatalf("after reconciling: Get() = %+v, %v; want the abandoned request COMPLETED", done, err)
				}
				want, err := rebuild(old, oldCharge)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(&want, done.Response); diff != "" {
					t.Errorf("reconciled answer mismatch (-want +got):\n%s", diff)
				}
			}

			retry := send(t, h, raw, newReq)
			switch {
			case tt.another && tt.restored:
				if retry.Code != http.StatusUnprocessableEntity || !strings.Contains(retry.Body.String(), "idempotency_key_reused") {
					t.Errorf("newer request's retry = %d %s, want 422 idempotency_key_reused (the key names the abandoned request)", retry.Code, retry.Body)
				}
				oldRetry := send(t, h, raw, oldReq)
				want, _ := rebuild(old, oldCharge)
				if oldRetry.Code != want.Status || oldRetry.Body.String() != string(want.Body) || oldRetry.Header().Get(idempotency.ReplayedHeader) != "true" {
					t.Errorf("abandoned request's retry = %d %s, want its charge replayed: %d %s", oldRetry.Code, oldRetry.Body, want.Status, want.Body)
				}
			default:
				if retry.Code != first.Code || retry.Body.String() != first.Body.String() || retry.Header().Get(idempotency.ReplayedHeader) != "true" {
					t.Errorf("retry = %d %s (replayed %q), want the first answer replayed: %d %s",
						retry.Code, retry.Body, retry.Header().Get(idempotency.ReplayedHeader), first.Code, first.Body)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the newer request executed %d times, want 1", n)
			}
			if !tt.another {
				newCharge, err := w.provider.Lookup(t.Context(), old.ForwardKey())
				if err != nil || newCharge.ID != oldCharge.ID {
					t.Errorf("provider charge for the request = %+v, %v; want the one charge %s", newCharge, err, oldCharge.ID)
				}
			}
		})
	}
}

// TestSweeperRetryMeetsNewerRecord: the retried restore meets each state a
// newer record of the key can be in. It takes the key exactly when a new
// request could; a holder whose reservation it takes is fenced, and one
// whose reservation it leaves completes.
func TestSweeperRetryMeetsNewerRecord(t *testing.T) {
	w := newWorld(t)
	payments := w.names.ByLogicalID["PaymentsTable"]
	type newer struct {
		rec  idempotency.Record
		gone bool // released: the key was used and is free again
	}
	tests := []struct {
		name     string
		newer    func(t *testing.T, key idempotency.Key, at time.Time) newer
		restored bool
		holder   bool // the newer record is a reservation whose process then completes
	}{
		{
			name: "External reservation within its lease",
			newer: func(t *testing.T, key idempotency.Key, at time.Time) newer {
				return newer{rec: w.reserve(t, reservation(key, at.Add(-5*time.Second), 30*time.Second))}
			},
			holder: true,
		},
		{
			name: "External reservation past its lease, its process still running",
			newer: func(t *testing.T, key idempotency.Key, at time.Time) newer {
				return newer{rec: w.reserve(t, reservation(key, at.Add(-40*time.Second), 30*time.Second))}
			},
			holder: true,
		},
		{
			name: "UNKNOWN within its retention",
			newer: func(t *testing.T, key idempotency.Key, at time.Time) newer {
				res := w.reserve(t, reservation(key, at.Add(-40*time.Second), 30*time.Second))
				return newer{rec: w.markUnknown(t, res, at.Add(time.Hour), at.Add(-5*time.Second))}
			},
		},
		{
			// Never free: its outcome is unknown, however old.
			name: "UNKNOWN past its retention",
			newer: func(t *testing.T, key idempotency.Key, at time.Time) newer {
				res := w.reserve(t, reservation(key, at.Add(-40*time.Second), 30*time.Second))
				return newer{rec: w.markUnknown(t, res, at.Add(-time.Second), at.Add(-5*time.Second))}
			},
		},
		{
			name: "Leased reservation (another route) past its lease, its process still running",
			newer: func(t *testing.T, key idempotency.Key, at time.Time) newer {
				rec := reservation(key, at.Add(-40*time.Second), 30*time.Second)
				rec.Route, rec.External, rec.Request = "POST /v1/payments", false, nil
				return newer{rec: w.reserve(t, rec)}
			},
			restored: true, holder: true,
		},
		{
			name: "released: used and free again",
			newer: func(t *testing.T, key idempotency.Key, at time.Time) newer {
				res := w.reserve(t, reservation(key, at.Add(-5*time.Second), 30*time.Second))
				if err := w.store.Release(t.Context(), key, res.LeaseToken, nil); err != nil {
					t.Fatalf("Release: %v", err)
				}
				return newer{rec: res, gone: true}
			},
			restored: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := idempotency.NewKey("acme", strings.ReplaceAll(t.Name(), " ", "-"))
			now := time.Now()
			old := requestOf(t, key, chargeRequest, now.Add(-2*time.Minute), 30*time.Second)
			remove := w.abandon(t, old)
			w.failSweep(t, remove)

			n := tt.newer(t, key, now)
			before, beforeErr := w.store.Get(t.Context(), key)
			took, unrestored := w.sweepRetry(t, remove, now)
			if took != tt.restored {
				t.Fatalf("retried restore took the key: %v, want %v", took, tt.restored)
			}
			// Every newer record here is a new reservation (created after the
			// abandoned one), of the same request: it may have run the
			// request again.
			if want := !tt.restored && beforeErr == nil; unrestored != want {
				t.Errorf("zombie_unrestored counted: %v, want %v (whenever a new reservation holds the key)", unrestored, want)
			}
			if reclaimable := n.gone || before.Reclaimable(now); reclaimable != tt.restored {
				t.Errorf("key free for a new request at the retry: %v, want %v (the restore takes the key exactly when one could)", reclaimable, tt.restored)
			}
			got, err := w.store.Get(t.Context(), key)
			switch {
			case tt.restored:
				if err != nil || got.Status != idempotency.StatusUnknown || got.Fingerprint != old.Fingerprint || got.LeaseToken == n.rec.LeaseToken {
					t.Fatalf("after the retried restore: Get() = %+v, %v; want the abandoned request UNKNOWN under a fresh lease", got, err)
				}
			case beforeErr != nil || err != nil || !cmp.Equal(before, got):
				t.Fatalf("after the retried restore: Get() = %+v, %v; want the newer record unchanged: %+v, %v", got, err, before, beforeErr)
			}
			if !tt.holder {
				return
			}

			// The newer reservation's process completes, committing an
			// effect with its record.
			done := n.rec
			done.Status, done.Request = idempotency.StatusCompleted, nil
			done.Response = &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{"newer":true}`)}
			effect := dynamo.Insert(payments, "pk", map[string]string{"pk": key.ID()})
			err = w.store.Complete(t.Context(), done, n.rec.LeaseToken, []idempotency.Effect{effect})
			var conflict *idempotency.ConflictError
			switch {
			case tt.restored && !errors.As(err, &conflict):
				t.Errorf("holder's Complete = %v, want a *ConflictError (its lease was taken)", err)
			case !tt.restored && err != nil:
				t.Errorf("holder's Complete = %v, want nil (its reservation was left alone)", err)
			}
			if got := dynamotest.Exists(t, w.db, payments, key.ID()); got == tt.restored {
				t.Errorf("holder's effect written: %v, want %v", got, !tt.restored)
			}
		})
	}
}

// reserve writes rec at its creation time and returns it.
func (w world) reserve(t *testing.T, rec idempotency.Record) idempotency.Record {
	t.Helper()
	if err := w.store.Reserve(t.Context(), rec, nil, rec.CreatedAt); err != nil {
		t.Fatalf("Reserve(newer): %v", err)
	}
	return rec
}

// markUnknown moves res to UNKNOWN at markedAt, kept until expires, and
// returns the record as stored.
func (w world) markUnknown(t *testing.T, res idempotency.Record, expires, markedAt time.Time) idempotency.Record {
	t.Helper()
	if err := w.store.MarkUnknown(t.Context(), res.Key, res.LeaseToken, idempotency.NewToken(), expires, markedAt); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	rec, err := w.store.Get(t.Context(), res.Key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
