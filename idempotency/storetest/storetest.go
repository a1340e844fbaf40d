package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/racing"
)

// EffectItem is the item of the effects the suite writes.
type EffectItem struct {
	PK   string `dynamodbav:"pk"`
	Note string `dynamodbav:"note"`
}

// Inspect is what the suite needs of a store beyond the interface.
type Inspect struct {
	// EffectTable is a table whose string partition key is "pk", for the
	// suite's effects.
	EffectTable string
	// Effects returns the items in EffectTable, by key.
	Effects func(t *testing.T) map[string]EffectItem
	// Insert returns the store's effect that inserts item, under its PK,
	// into EffectTable, failing (with an error that is not a rejection's
	// business answer) when an item with that key exists.
	Insert func(item EffectItem) idempotency.Effect
	// Require returns the store's effect that writes nothing and is
	// rejected with reject when EffectTable has no item with key pk.
	Require func(pk string, reject error) idempotency.Effect
	// ExpireTTL, for a store whose records a TTL process deletes (as
	// DynamoDB's does), deletes key's record as that process would at now,
	// and reports whether it did. Nil for a store that deletes nothing by
	// itself (the in-memory store): the suite then checks only what such
	// a store must keep.
	ExpireTTL func(t *testing.T, key idempotency.Key, now time.Time) bool
}

// NewStore returns a store for one test. Tests may share the store's tables:
// each uses keys (and effect keys) of its own.
type NewStore func(t *testing.T) (idempotency.Store, Inspect)

// t0 is the suite's reference time, in the future so that DynamoDB's TTL
// never deletes a record under test, and a whole number of milliseconds
// as the stores keep times.
var t0 = time.Date(2040, 1, 2, 3, 4, 5, 678_000_000, time.UTC)

// Run runs the conformance suite against the stores newStore makes, one per
// subtest.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Reclaim", func(t *testing.T) { testReclaim(t, newStore) })
	t.Run("CommitEffects", func(t *testing.T) { testCommitEffects(t, newStore) })
	t.Run("Complete", func(t *testing.T) { testComplete(t, newStore) })
	t.Run("CompleteEffects", func(t *testing.T) { testCompleteEffects(t, newStore) })
	t.Run("CompleteNotCompleted", func(t *testing.T) { testCompleteNotCompleted(t, newStore) })
	t.Run("Release", func(t *testing.T) { testRelease(t, newStore) })
	t.Run("ReleaseEffects", func(t *testing.T) { testReleaseEffects(t, newStore) })
	t.Run("Rejections", func(t *testing.T) { testRejections(t, newStore) })
	t.Run("MarkUnknown", func(t *testing.T) { testMarkUnknown(t, newStore) })
	t.Run("UnknownSince", func(t *testing.T) { testUnknownSince(t, newStore) })
	t.Run("Advance", func(t *testing.T) { testAdvance(t, newStore) })
	t.Run("UnknownOutlivesTTL", func(t *testing.T) { testUnknownOutlivesTTL(t, newStore) })
	t.Run("ExternalOutlivesTTL", func(t *testing.T) { testExternalOutlivesTTL(t, newStore) })
	t.Run("Get", func(t *testing.T) { testGet(t, newStore) })
	t.Run("Bodies", func(t *testing.T) { testBodies(t, newStore) })
	t.Run("LargeBodies", func(t *testing.T) { testLargeBodies(t, newStore) })
	t.Run("Headers", func(t *testing.T) { testHeaders(t, newStore) })
	t.Run("Times", func(t *testing.T) { testTimes(t, newStore) })
	t.Run("Rewrite", func(t *testing.T) { testRewrite(t, newStore) })
	t.Run("ConcurrentCommit", func(t *testing.T) { testConcurrentCommit(t, newStore) })
	t.Run("ConcurrentReserve", func(t *testing.T) { testConcurrentReserve(t, newStore) })
}

// key returns a key unique to the test and name.
func key(t *testing.T, name string) idempotency.Key {
	return idempotency.NewKey("acme", t.Name()+"/"+name)
}

// completed is a COMPLETED record expiring at expires.
func completed(key idempotency.Key, fingerprint string, expires time.Time) idempotency.Record {
	return idempotency.Record{
		Key:         key,
		Status:      idempotency.StatusCompleted,
		Route:       "POST /v1/payments",
		Fingerprint: fingerprint,
		ExpiresAt:   expires,
		Response: &idempotency.Response{
			Status: 201,
			Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/pay_" + fingerprint},
			Body:   []byte(`{"id":"pay_` + fingerprint + `","amount":1000}` + "\n\xff\x00"),
		},
		CreatedAt: expires.Add(-24 * time.Hour),
		UpdatedAt: expires.Add(-24 * time.Hour),
	}
}

// reserved is an IN_PROGRESS record under lease, expiring at expires.
func reserved(key idempotency.Key, fingerprint, lease string, external bool, expires time.Time) idempotency.Record {
	rec := idempotency.Record{
		Key:         key,
		Status:      idempotency.StatusInProgress,
		Route:       "POST /v1/charges",
		Fingerprint: fingerprint,
		External:    external,
		LeaseToken:  lease,
		ExpiresAt:   expires,
		CreatedAt:   expires.Add(-30 * time.Second),
		UpdatedAt:   expires.Add(-30 * time.Second),
	}
	if external {
		rec.Request = []byte(`{"amount":1000,"currency":"usd"}`)
	}
	return rec
}

// unknown is rec moved to UNKNOWN.
func unknown(rec idempotency.Record) idempotency.Record {
	rec.Status = idempotency.StatusUnknown
	return rec
}

// done is the COMPLETED record that completes the reservation rec at now.
func done(rec idempotency.Record, now time.Time) idempotency.Record {
	c := completed(rec.Key, rec.Fingerprint, now.Add(24*time.Hour))
	c.Route = rec.Route
	c.External = rec.External
	c.LeaseToken = rec.LeaseToken
	c.Request = rec.Request
	c.CreatedAt = rec.CreatedAt
	c.UpdatedAt = now
	return c
}

// effect is an insert of the effect item key (scoped to the test) into the
// effect table.
func effect(t *testing.T, in Inspect, key, note string) idempotency.Effect {
	key = scope(t) + key
	return in.Insert(EffectItem{PK: key, Note: note})
}

// scope prefixes the test's effect keys, so that tests may share an effect
// table.
func scope(t *testing.T) string {
	sum := sha256.Sum256([]byte(t.Name()))
	return hex.EncodeToString(sum[:6]) + ":"
}

// put stores rec as it is, whatever its status, at a time no record expires.
func put(t *testing.T, s idempotency.Store, rec idempotency.Record, effects ...idempotency.Effect) {
	t.Helper()
	var err error
	if rec.Status == idempotency.StatusCompleted {
		err = s.Commit(t.Context(), rec, effects, t0.Add(-time.Hour))
	} else {
		err = s.Reserve(t.Context(), rec, effects, t0.Add(-time.Hour))
	}
	if err != nil {
		t.Fatalf("storing %s record: %v", rec.Status, err)
	}
}

// wantRecord checks that the store holds want for want.Key.
func wantRecord(t *testing.T, s idempotency.Store, want idempotency.Record) {
	t.Helper()
	got, err := s.Get(t.Context(), want.Key)
	if err != nil {
		t.Fatalf("Get(%s) = %v, want the %s record", want.Key.Short(), err, want.Status)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get(%s) mismatch (-want +got):\n%s", want.Key.Short(), diff)
	}
}

// wantAbsent checks that the store holds no record for key.
func wantAbsent(t *testing.T, s idempotency.Store, key idempotency.Key) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("Get(%s) = %+v, %v, want ErrNotFound", key.Short(), got, err)
	}
}

// wantConflict checks that err is a *idempotency.ConflictError carrying want
// (nil for none).
func wantConflict(t *testing.T, call string, err error, want *idempotency.Record) {
	t.Helper()
	var conflict *idempotency.ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("%s = %v, want a *ConflictError", call, err)
	}
	if diff := cmp.Diff(want, conflict.Existing); diff != "" {
		t.Errorf("%s: ConflictError.Existing mismatch (-want +got):\n%s", call, diff)
	}
}

// wantEffects checks the keys of the test's items in the effect table, and
// returns the items by key, unscoped.
func wantEffects(t *testing.T, in Inspect, keys ...string) map[string]EffectItem {
	t.Helper()
	items := map[string]EffectItem{}
	for k, item := range in.Effects(t) {
		if k, ok := strings.CutPrefix(k, scope(t)); ok {
			items[k] = item
		}
	}
	got := slices.Sorted(maps.Keys(items))
	want := slices.Sorted(slices.Values(keys))
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("effect items mismatch (-want +got):\n%s", diff)
	}
	return items
}

// testReclaim checks Commit's and Reserve's condition against every kind of
// existing record, Reserve's both without effects and with them (a
// reservation's holds, which a store may write another way): the same
// records are taken, and a reservation that loses writes no hold.
func testReclaim(t *testing.T, newStore NewStore) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		existing func(k idempotency.Key) *idempotency.Record // nil: no record
		now      time.Time
		wantWin  bool
	}{
		{"absent", nil, t0, true},
		{"completed live", func(k idempotency.Key) *idempotency.Record {
			r := completed(k, "a", t0)
			return &r
		}, t0.Add(-ms), false},
		{"completed expired", func(k idempotency.Key) *idempotency.Record {
			r := completed(k, "a", t0)
			return &r
		}, t0, true},
		{"completed external expired", func(k idempotency.Key) *idempotency.Record {
			r := completed(k, "a", t0)
			r.External = true
			return &r
		}, t0, true},
		{"in progress live", func(k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease-a", false, t0)
			return &r
		}, t0.Add(-ms), false},
		{"in progress expired", func(k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease-a", false, t0)
			return &r
		}, t0, true},
		{"in progress external live", func(k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease-a", true, t0)
			return &r
		}, t0.Add(-ms), false},
		{"in progress external expired", func(k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease-a", true, t0)
			return &r
		}, t0.Add(time.Hour), false},
		{"unknown live", func(k idempotency.Key) *idempotency.Record {
			r := unknown(reserved(k, "a", "lease-a", true, t0))
			return &r
		}, t0.Add(-ms), false},
		// An UNKNOWN record's outcome at the other system is unknown: it
		// never expires into a free key, only the reconciler (or an
		// operator's fenced delete) ends it.
		{"unknown expired", func(k idempotency.Key) *idempotency.Record {
			r := unknown(reserved(k, "a", "lease-a", true, t0))
			return &r
		}, t0, false},
		{"unknown expired long ago", func(k idempotency.Key) *idempotency.Record {
			r := unknown(reserved(k, "a", "lease-a", true, t0))
			return &r
		}, t0.Add(365 * 24 * time.Hour), false},
		{"unknown not external expired", func(k idempotency.Key) *idempotency.Record {
			r := unknown(reserved(k, "a", "lease-a", false, t0))
			return &r
		}, t0, false},
	}
	for _, op := range []string{"Commit", "Reserve", "ReserveHolds"} {
		for _, tt := range tests {
			t.Run(op+"/"+tt.name, func(t *testing.T) {
				s, in := newStore(t)
				k := key(t, "k")
				var existing *idempotency.Record
				if tt.existing != nil {
					existing = tt.existing(k)
					put(t, s, *existing)
				}
				var rec idempotency.Record
				var err error
				switch op {
				case "Commit":
					rec = completed(k, "b", tt.now.Add(24*time.Hour))
					err = s.Commit(t.Context(), rec, []idempotency.Effect{effect(t, in, "pay_b", "b")}, tt.now)
				case "Reserve":
					rec = reserved(k, "b", "lease-b", true, tt.now.Add(30*time.Second))
					err = s.Reserve(t.Context(), rec, nil, tt.now)
				case "ReserveHolds":
					rec = reserved(k, "b", "lease-b", true, tt.now.Add(30*time.Second))
					err = s.Reserve(t.Context(), rec, []idempotency.Effect{effect(t, in, "hold_b", "b")}, tt.now)
				}
				call := fmt.Sprintf("%s(%s) at %s", op, tt.name, tt.now.Format(time.RFC3339Nano))
				if tt.wantWin {
					if err != nil {
						t.Fatalf("%s = %v, want nil", call, err)
					}
					wantRecord(t, s, rec)
					switch op {
					case "Commit":
						wantEffects(t, in, "pay_b")
					case "ReserveHolds":
						wantEffects(t, in, "hold_b")
					}
					return
				}
				wantConflict(t, call, err, existing)
				wantRecord(t, s, *existing)
				wantEffects(t, in)
			})
		}
	}
}

// testCommitEffects checks that a Commit whose effect collides writes
// nothing, and does not report a conflict.
func testCommitEffects(t *testing.T, newStore NewStore) {
	s, in := newStore(t)
	first := completed(key(t, "first"), "a", t0)
	if err := s.Commit(t.Context(), first, []idempotency.Effect{effect(t, in, "pay_x", "first")}, t0); err != nil {
		t.Fatalf("Commit(first) = %v, want nil", err)
	}
	second := completed(key(t, "second"), "b", t0)
	err := s.Commit(t.Context(), second, []idempotency.Effect{effect(t, in, "pay_y", "second"), effect(t, in, "pay_x", "second")}, t0)
	var conflict *idempotency.ConflictError
	if err == nil || errors.As(err, &conflict) || errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("Commit(second) with a colliding effect = %v, want an error that is neither a conflict nor unavailable", err)
	}
	wantAbsent(t, s, second.Key)
	items := wantEffects(t, in, "pay_x")
	if got := items["pay_x"].Note; got != "first" {
		t.Errorf("effect pay_x note = %q, want %q", got, "first")
	}
}

func testComplete(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	tests := []struct {
		name    string
		setup   func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record // the current record
		wantWin bool
	}{
		{"held", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease", false, t0)
			put(t, s, r)
			return &r
		}, true},
		{"held external", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease", true, t0)
			put(t, s, r)
			return &r
		}, true},
		{"held unknown", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			r := unknown(reserved(k, "a", "lease", true, t0))
			put(t, s, r)
			return &r
		}, true},
		{"held past expiry", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease", false, now.Add(-time.Minute))
			if err := s.Reserve(t.Context(), r, nil, now.Add(-2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			return &r
		}, true},
		{"other lease", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "other", false, t0)
			put(t, s, r)
			return &r
		}, false},
		{"gone", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			return nil
		}, false},
		{"released", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			put(t, s, reserved(k, "a", "lease", false, t0))
			if err := s.Release(t.Context(), k, "lease", nil); err != nil {
				t.Fatal(err)
			}
			return nil
		}, false},
		{"completed under the lease", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease", false, t0)
			put(t, s, r)
			c := done(r, now.Add(-time.Second))
			if err := s.Complete(t.Context(), c, "lease", nil); err != nil {
				t.Fatal(err)
			}
			return &c
		}, false},
		{"taken over", func(t *testing.T, s idempotency.Store, k idempotency.Key) *idempotency.Record {
			if err := s.Reserve(t.Context(), reserved(k, "a", "lease", false, now.Add(-time.Minute)), nil, now.Add(-2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			r := reserved(k, "a", "newer", false, t0)
			if err := s.Reserve(t.Context(), r, nil, now); err != nil {
				t.Fatal(err)
			}
			return &r
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, in := newStore(t)
			k := key(t, "k")
			current := tt.setup(t, s, k)
			base := reserved(k, "a", "lease", false, t0)
			if current != nil {
				base = *current
			}
			base.LeaseToken = "lease"
			rec := done(base, now)
			err := s.Complete(t.Context(), rec, "lease", nil)
			call := fmt.Sprintf("Complete(%s)", tt.name)
			if tt.wantWin {
				if err != nil {
					t.Fatalf("%s = %v, want nil", call, err)
				}
				wantRecord(t, s, rec)
				return
			}
			wantConflict(t, call, err, current)
			if current == nil {
				wantAbsent(t, s, k)
			} else {
				wantRecord(t, s, *current)
			}
			wantEffects(t, in)
		})
	}
}

// testCompleteNotCompleted checks that Complete refuses a record that is
// not COMPLETED: an error wrapping ErrNotCompleted, never a conflict, and
// nothing written (a store keeps a COMPLETED record differently: its TTL,
// its answer's chunks).
func testCompleteNotCompleted(t *testing.T, newStore NewStore) {
	for _, status := range []idempotency.Status{idempotency.StatusInProgress, idempotency.StatusUnknown, "", "PENDING"} {
		name := string(status)
		if name == "" {
			name = "empty"
		}
		t.Run(name, func(t *testing.T) {
			s, in := newStore(t)
			r := reserved(key(t, "k"), "a", "lease", true, t0)
			put(t, s, r)
			c := done(r, t0.Add(-time.Second))
			c.Status = status
			err := s.Complete(t.Context(), c, "lease", []idempotency.Effect{effect(t, in, "paid", "x")})
			var conflict *idempotency.ConflictError
			if !errors.Is(err, idempotency.ErrNotCompleted) || errors.As(err, &conflict) || errors.Is(err, idempotency.ErrUnavailable) {
				t.Errorf("Complete(Status %q) = %v, want ErrNotCompleted, neither a *ConflictError nor unavailable", status, err)
			}
			wantEffects(t, in)
			wantRecord(t, s, r)
		})
	}
}

// testCompleteEffects checks that Complete writes its effects with the record
// or not at all.
func testCompleteEffects(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	t.Run("written", func(t *testing.T) {
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "lease", false, t0)
		put(t, s, r)
		c := done(r, now)
		if err := s.Complete(t.Context(), c, "lease", []idempotency.Effect{effect(t, in, "pay_a", "a"), effect(t, in, "pay_b", "b")}); err != nil {
			t.Fatalf("Complete with effects = %v, want nil", err)
		}
		wantRecord(t, s, c)
		items := wantEffects(t, in, "pay_a", "pay_b")
		if diff := cmp.Diff(EffectItem{PK: scope(t) + "pay_b", Note: "b"}, items["pay_b"]); diff != "" {
			t.Errorf("effect item mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("collision", func(t *testing.T) {
		s, in := newStore(t)
		put(t, s, completed(key(t, "other"), "o", t0), effect(t, in, "pay_x", "other"))
		r := reserved(key(t, "k"), "a", "lease", false, t0)
		put(t, s, r)
		err := s.Complete(t.Context(), done(r, now), "lease", []idempotency.Effect{effect(t, in, "pay_a", "a"), effect(t, in, "pay_x", "a")})
		var conflict *idempotency.ConflictError
		if err == nil || errors.As(err, &conflict) || errors.Is(err, idempotency.ErrUnavailable) {
			t.Fatalf("Complete with a colliding effect = %v, want an error that is neither a conflict nor unavailable", err)
		}
		wantRecord(t, s, r)
		items := wantEffects(t, in, "pay_x")
		if got := items["pay_x"].Note; got != "other" {
			t.Errorf("effect pay_x note = %q, want %q", got, "other")
		}
	})
	t.Run("fenced", func(t *testing.T) {
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "newer", false, t0)
		put(t, s, r)
		c := done(r, now)
		c.LeaseToken = "lease"
		err := s.Complete(t.Context(), c, "lease", []idempotency.Effect{effect(t, in, "pay_a", "a")})
		wantConflict(t, "Complete with effects under a lost lease", err, &r)
		wantRecord(t, s, r)
		wantEffects(t, in)
	})
	t.Run("gone", func(t *testing.T) {
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "lease", false, t0)
		err := s.Complete(t.Context(), done(r, now), "lease", []idempotency.Effect{effect(t, in, "pay_a", "a")})
		wantConflict(t, "Complete with effects of a record that is gone", err, nil)
		wantAbsent(t, s, r.Key)
		wantEffects(t, in)
	})
}

// leaseTests are the states Release and MarkUnknown are fenced against.
func leaseTests(now time.Time) []struct {
	name    string
	current func(k idempotency.Key) *idempotency.Record
	wantWin bool
} {
	return []struct {
		name    string
		current func(k idempotency.Key) *idempotency.Record
		wantWin bool
	}{
		{"held", func(k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "lease", true, t0)
			return &r
		}, true},
		{"held unknown", func(k idempotency.Key) *idempotency.Record {
			r := unknown(reserved(k, "a", "lease", true, t0))
			return &r
		}, true},
		{"held unknown since", func(k idempotency.Key) *idempotency.Record {
			r := unknown(reserved(k, "a", "lease", true, t0))
			r.UnknownSince = now.Add(-5 * time.Minute)
			return &r
		}, true},
		{"other lease", func(k idempotency.Key) *idempotency.Record {
			r := reserved(k, "a", "other", true, t0)
			return &r
		}, false},
		{"gone", func(k idempotency.Key) *idempotency.Record { return nil }, false},
		{"completed under the lease", func(k idempotency.Key) *idempotency.Record {
			r := done(reserved(k, "a", "lease", true, t0), now.Add(-time.Second))
			return &r
		}, false},
	}
}

func testRelease(t *testing.T, newStore NewStore) {
	for _, tt := range leaseTests(t0.Add(-10 * time.Second)) {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			k := key(t, "k")
			current := tt.current(k)
			if current != nil {
				put(t, s, *current)
			}
			err := s.Release(t.Context(), k, "lease", nil)
			call := fmt.Sprintf("Release(%s)", tt.name)
			if tt.wantWin {
				if err != nil {
					t.Fatalf("%s = %v, want nil", call, err)
				}
				wantAbsent(t, s, k)
				return
			}
			wantConflict(t, call, err, current)
			if current != nil {
				wantRecord(t, s, *current)
			}
		})
	}
}

func testMarkUnknown(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	expires := now.Add(24 * time.Hour)
	for _, tt := range leaseTests(now) {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			k := key(t, "k")
			current := tt.current(k)
			if current != nil {
				put(t, s, *current)
			}
			err := s.MarkUnknown(t.Context(), k, "lease", "new-lease", expires, now)
			call := fmt.Sprintf("MarkUnknown(%s)", tt.name)
			if tt.wantWin {
				if err != nil {
					t.Fatalf("%s = %v, want nil", call, err)
				}
				want := *current
				want.Status = idempotency.StatusUnknown
				want.LeaseToken = "new-lease"
				want.ExpiresAt = expires
				want.UpdatedAt = now
				if want.UnknownSince.IsZero() {
					// From IN_PROGRESS, or an UNKNOWN record written
					// before stores kept it: UNKNOWN from now on.
					want.UnknownSince = now
				}
				wantRecord(t, s, want)
				return
			}
			wantConflict(t, call, err, current)
			if current != nil {
				wantRecord(t, s, *current)
			} else {
				wantAbsent(t, s, k)
			}
		})
	}
}

// testUnknownSince checks Record.UnknownSince: MarkUnknown of an
// IN_PROGRESS record sets it to the write's time, and every later write
// that keeps the record UNKNOWN without calling out (a redrive's
// MarkUnknown under a new lease token) carries it unchanged while
// UpdatedAt moves: the reconciler measures its settle wait from it, and a
// client retrying more often than that wait must not put it off for ever.
// A Resolver's Advance of the UNKNOWN record sets it to its time: the
// phases it resumes may call out again. An UNKNOWN
// record written without one (before stores kept it) gets the time of its
// next MarkUnknown; a Reserve of an UNKNOWN record (a restore) keeps the
// one it is given; a record of any other status carries none.
func testUnknownSince(t *testing.T, newStore NewStore) {
	first := t0.Add(-time.Hour)
	redrive := func(t *testing.T, s idempotency.Store, k idempotency.Key, lease, next string, at time.Time) {
		t.Helper()
		if err := s.MarkUnknown(t.Context(), k, lease, next, at.Add(24*time.Hour), at); err != nil {
			t.Fatalf("MarkUnknown(%s -> %s) = %v, want nil", lease, next, err)
		}
	}
	want := func(t *testing.T, s idempotency.Store, k idempotency.Key, step string, status idempotency.Status, since, updated time.Time) {
		t.Helper()
		got, err := s.Get(t.Context(), k)
		if err != nil {
			t.Fatalf("%s: Get = %v", step, err)
		}
		if got.Status != status || !got.UnknownSince.Equal(since) || !got.UpdatedAt.Equal(updated) {
			t.Errorf("%s: record %s, UnknownSince %v, UpdatedAt %v; want %s, %v, %v",
				step, got.Status, got.UnknownSince, got.UpdatedAt, status, since, updated)
		}
	}
	unknownStatus := idempotency.StatusUnknown
	t.Run("marked then redriven", func(t *testing.T) {
		s, _ := newStore(t)
		k := key(t, "k")
		put(t, s, reserved(k, "a", "lease", true, first))
		want(t, s, k, "reserved", idempotency.StatusInProgress, time.Time{}, first.Add(-30*time.Second))
		redrive(t, s, k, "lease", "u1", first)
		want(t, s, k, "MarkUnknown", unknownStatus, first, first)
		redrive(t, s, k, "u1", "u2", first.Add(time.Minute))
		want(t, s, k, "first redrive", unknownStatus, first, first.Add(time.Minute))
		redrive(t, s, k, "u2", "u3", first.Add(2*time.Minute))
		want(t, s, k, "second redrive", unknownStatus, first, first.Add(2*time.Minute))
		p := idempotency.Progress{Point: "charge_created", Data: map[string]string{"charge": "ch_1"}, Added: map[string]string{"charge": "ch_1"},
			LeaseToken: "u3", ExpiresAt: first.Add(24 * time.Hour), UpdatedAt: first.Add(3 * time.Minute), Status: unknownStatus, External: true}
		if err := s.Advance(t.Context(), k, "u3", p, nil); err != nil {
			t.Fatalf("Advance(UNKNOWN) = %v, want nil", err)
		}
		want(t, s, k, "a Resolver's Advance", unknownStatus, first.Add(3*time.Minute), first.Add(3*time.Minute))
		redrive(t, s, k, "u3", "u4", first.Add(4*time.Minute))
		want(t, s, k, "a redrive after the Advance", unknownStatus, first.Add(3*time.Minute), first.Add(4*time.Minute))
		rec, err := s.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		c := done(rec, first.Add(5*time.Minute))
		c.UnknownSince = rec.UnknownSince // a COMPLETED record carries none, whatever it is given
		if err := s.Complete(t.Context(), c, "u4", nil); err != nil {
			t.Fatalf("Complete = %v, want nil", err)
		}
		want(t, s, k, "completed", idempotency.StatusCompleted, time.Time{}, c.UpdatedAt)
	})
	t.Run("written without one", func(t *testing.T) {
		s, _ := newStore(t)
		k := key(t, "k")
		legacy := unknown(reserved(k, "a", "lease", true, first.Add(30*time.Second)))
		put(t, s, legacy)
		want(t, s, k, "written UNKNOWN without it", unknownStatus, time.Time{}, legacy.UpdatedAt)
		redrive(t, s, k, "lease", "u1", first)
		want(t, s, k, "first redrive", unknownStatus, first, first)
		redrive(t, s, k, "u1", "u2", first.Add(time.Minute))
		want(t, s, k, "second redrive", unknownStatus, first, first.Add(time.Minute))
	})
	t.Run("restored", func(t *testing.T) {
		s, _ := newStore(t)
		k := key(t, "k")
		restored := unknown(reserved(k, "a", "lease", true, first.Add(time.Hour)))
		restored.UnknownSince = first.Add(-time.Hour)
		put(t, s, restored)
		wantRecord(t, s, restored)
		redrive(t, s, k, "lease", "u1", first)
		want(t, s, k, "redrive", unknownStatus, restored.UnknownSince, first)
	})
	t.Run("other statuses", func(t *testing.T) {
		s, _ := newStore(t)
		r := reserved(key(t, "reserved"), "a", "lease", true, first.Add(30*time.Second))
		r.UnknownSince = first
		put(t, s, r)
		want(t, s, r.Key, "Reserve(IN_PROGRESS with UnknownSince)", idempotency.StatusInProgress, time.Time{}, r.UpdatedAt)
		redrive(t, s, r.Key, "lease", "u1", first.Add(time.Minute))
		want(t, s, r.Key, "MarkUnknown", unknownStatus, first.Add(time.Minute), first.Add(time.Minute))
		c := completed(key(t, "completed"), "a", t0)
		c.UnknownSince = first
		put(t, s, c)
		want(t, s, c.Key, "Commit(COMPLETED with UnknownSince)", idempotency.StatusCompleted, time.Time{}, c.UpdatedAt)
	})
}

func testGet(t *testing.T, newStore NewStore) {
	s, _ := newStore(t)
	k := key(t, "k")
	wantAbsent(t, s, k)
	rec := completed(k, "a", t0)
	put(t, s, rec)
	got, err := s.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get = %v, want nil", err)
	}
	// The record returned is the caller's.
	got.Response.Body[0] = 'X'
	got.Response.Header["Content-Type"] = "text/plain"
	wantRecord(t, s, rec)
	wantAbsent(t, s, key(t, "other"))
	wantAbsent(t, s, idempotency.NewKey("globex", t.Name()+"/k"))
}

func testBodies(t *testing.T, newStore NewStore) {
	large := make([]byte, 64<<10)
	for i := range large {
		large[i] = byte(i*7 + i>>8)
	}
	tests := []struct {
		name string
		body []byte
	}{
		{"json", []byte(`{"id":"pay_1","amount":1000,"note":"caf\u00e9 ☕"}`)},
		{"not utf-8", []byte{0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28, 0xed, 0xa0, 0x80, '\n', 0x00}},
		{"nul only", []byte{0}},
		{"empty", []byte{}},
		{"nil", nil},
		{"large", large},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			k := key(t, "k")
			rec := completed(k, "a", t0)
			rec.External = true
			rec.Request = tt.body
			rec.Response.Body = tt.body
			put(t, s, rec)
			got, err := s.Get(t.Context(), k)
			if err != nil {
				t.Fatalf("Get = %v, want nil", err)
			}
			checkBody := func(where string, got idempotency.Record) {
				t.Helper()
				if got.Response == nil {
					t.Fatalf("%s: Response = nil, want one", where)
				}
				if !bytes.Equal(got.Response.Body, tt.body) || got.Response.Body == nil {
					t.Errorf("%s: Response.Body = %q, want %q (non-nil)", where, got.Response.Body, tt.body)
				}
				if !bytes.Equal(got.Request, tt.body) || (len(tt.body) == 0 && got.Request != nil) {
					t.Errorf("%s: Request = %q, want %q (nil when empty)", where, got.Request, tt.body)
				}
			}
			checkBody("Get", got)
			err = s.Commit(t.Context(), completed(k, "b", t0), nil, t0.Add(-time.Hour))
			var conflict *idempotency.ConflictError
			if !errors.As(err, &conflict) || conflict.Existing == nil {
				t.Fatalf("second Commit = %v, want a *ConflictError with the record", err)
			}
			checkBody("ConflictError.Existing", *conflict.Existing)
		})
	}
}

func testHeaders(t *testing.T, newStore NewStore) {
	tests := []struct {
		name      string
		header    map[string]string
		setCookie []string
	}{
		{"several", map[string]string{
			"Content-Type":     "application/json; charset=utf-8",
			"Location":         "/v1/payments/pay_1",
			"X-Empty":          "",
			"X-Unicode":        "café ☕",
			"Cache-Control":    "no-store",
			"X-Request-Id":     strings.Repeat("r", 200),
			"Www-Authenticate": `Bearer realm="once", error="invalid_token"`,
			"Link":             `</v1/payments/pay_1>; rel="self", </v1/payments>; rel="collection"`,
		}, nil},
		{"empty", map[string]string{}, nil},
		{"nil", nil, nil},
		{"set-cookie lines, in order", map[string]string{"Content-Type": "application/json"},
			[]string{"b=2; Path=/", "a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT; HttpOnly", "b=2; Path=/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			rec := completed(key(t, "k"), "a", t0)
			rec.Response.Header, rec.Response.SetCookie = tt.header, tt.setCookie
			put(t, s, rec)
			got, err := s.Get(t.Context(), rec.Key)
			if err != nil {
				t.Fatalf("Get = %v, want nil", err)
			}
			want := tt.header
			if len(want) == 0 {
				want = nil // no headers are kept as nil
			}
			if diff := cmp.Diff(want, got.Response.Header); diff != "" {
				t.Errorf("Response.Header mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.setCookie, got.Response.SetCookie); diff != "" {
				t.Errorf("Response.SetCookie mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// testTimes checks that times are kept to the millisecond, and that the
// reclaim condition compares them at that precision, as Record.Reclaimable
// does on the stored record.
func testTimes(t *testing.T, newStore NewStore) {
	s, _ := newStore(t)
	k := key(t, "k")
	sub := 999 * time.Microsecond
	rec := reserved(k, "a", "lease", false, t0.Add(sub))
	rec.CreatedAt = t0.Add(-time.Minute + sub).In(time.FixedZone("X", 3600))
	rec.UpdatedAt = rec.CreatedAt
	if err := s.Reserve(t.Context(), rec, nil, t0.Add(-time.Hour)); err != nil {
		t.Fatalf("Reserve = %v, want nil", err)
	}
	want := rec
	want.ExpiresAt = t0
	want.CreatedAt = t0.Add(-time.Minute)
	want.UpdatedAt = want.CreatedAt
	got, err := s.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get = %v, want nil", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get mismatch (-want +got):\n%s", diff)
	}
	for _, tm := range []time.Time{got.ExpiresAt, got.CreatedAt, got.UpdatedAt} {
		if tm.Location() != time.UTC {
			t.Errorf("time %v in %v, want UTC", tm, tm.Location())
		}
	}
	// Stored expiry t0; now = t0 - 1µs is t0 - 1ms at store precision: live.
	err = s.Reserve(t.Context(), reserved(k, "b", "lease-b", false, t0.Add(time.Minute)), nil, t0.Add(-time.Microsecond))
	wantConflict(t, "Reserve just before the stored expiry", err, &want)
	// now = t0 + 1µs: expired.
	next := reserved(k, "b", "lease-b", false, t0.Add(time.Minute))
	if err := s.Reserve(t.Context(), next, nil, t0.Add(time.Microsecond)); err != nil {
		t.Fatalf("Reserve at the stored expiry = %v, want nil", err)
	}
}

// testRewrite checks that a write whose exact record is already in place
// under its lease token succeeds (how a store recognises its own write when
// its transport retried after a lost response), while a Commit without a
// lease token conflicts with its twin.
func testRewrite(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	s, in := newStore(t)
	ctx := t.Context()
	k := key(t, "leased")
	r := reserved(k, "a", "lease", true, t0)
	for i := range 2 {
		if err := s.Reserve(ctx, r, nil, now); err != nil {
			t.Fatalf("Reserve #%d = %v, want nil", i+1, err)
		}
	}
	for i := range 2 {
		if err := s.MarkUnknown(ctx, k, "lease", "lease-2", t0.Add(time.Hour), now); err != nil {
			t.Fatalf("MarkUnknown #%d = %v, want nil", i+1, err)
		}
	}
	r.LeaseToken = "lease-2"
	c := done(r, now)
	for i := range 2 {
		if err := s.Complete(ctx, c, "lease-2", []idempotency.Effect{effect(t, in, "pay_c", "c")}); err != nil {
			t.Fatalf("Complete #%d = %v, want nil", i+1, err)
		}
	}
	wantRecord(t, s, c)
	// A Commit of the same completion (the engine's fallback when the record
	// was released under it) carries the lease token too.
	if err := s.Commit(ctx, c, []idempotency.Effect{effect(t, in, "pay_c", "c")}, now); err != nil {
		t.Errorf("Commit of the record in place = %v, want nil", err)
	}
	// Another lease's identical-looking write conflicts.
	other := c
	other.LeaseToken = "lease-3"
	wantConflict(t, "Complete under another lease", s.Complete(ctx, other, "lease-3", nil), &c)

	atomic := completed(key(t, "atomic"), "a", t0)
	if err := s.Commit(ctx, atomic, nil, now); err != nil {
		t.Fatalf("Commit = %v, want nil", err)
	}
	wantConflict(t, "Commit again without a lease token", s.Commit(ctx, atomic, nil, now), &atomic)
	wantEffects(t, in, "pay_c")
}

// concurrency is how many goroutines race on one key.
const concurrency = 12

// winner checks that exactly one write succeeded and that every other one
// got a *ConflictError carrying the winner's record; it returns the winner.
func winner(t *testing.T, errs []error, recs []idempotency.Record) int {
	t.Helper()
	win := -1
	for i, err := range errs {
		if err == nil {
			if win >= 0 {
				t.Fatalf("writers %d and %d both succeeded, want exactly one", win, i)
			}
			win = i
		}
	}
	if win < 0 {
		t.Fatalf("no writer succeeded; errors: %v", errs)
	}
	for i, err := range errs {
		if i != win {
			wantConflict(t, fmt.Sprintf("writer %d", i), err, &recs[win])
		}
	}
	return win
}

func testConcurrentCommit(t *testing.T, newStore NewStore) {
	s, in := newStore(t)
	k := key(t, "k")
	recs := make([]idempotency.Record, concurrency)
	for i := range recs {
		recs[i] = completed(k, fmt.Sprintf("fp%02d", i), t0)
	}
	errs := racing.All(concurrency, func(i int) error {
		e := effect(t, in, fmt.Sprintf("pay_%02d", i), recs[i].Fingerprint)
		return s.Commit(t.Context(), recs[i], []idempotency.Effect{e}, t0.Add(-time.Hour))
	})
	win := winner(t, errs, recs)
	wantRecord(t, s, recs[win])
	wantEffects(t, in, fmt.Sprintf("pay_%02d", win))
}

func testConcurrentReserve(t *testing.T, newStore NewStore) {
	s, _ := newStore(t)
	k := key(t, "k")
	recs := make([]idempotency.Record, concurrency)
	for i := range recs {
		recs[i] = reserved(k, fmt.Sprintf("fp%02d", i), fmt.Sprintf("lease%02d", i), i%2 == 0, t0)
	}
	errs := racing.All(concurrency, func(i int) error {
		return s.Reserve(t.Context(), recs[i], nil, t0.Add(-time.Hour))
	})
	win := winner(t, errs, recs)
	wantRecord(t, s, recs[win])
}

// testReleaseEffects checks that Release writes its effects exactly when it
// releases: with the lease held, and not when it is lost.
func testReleaseEffects(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	for _, tt := range leaseTests(now) {
		t.Run(tt.name, func(t *testing.T) {
			s, in := newStore(t)
			k := key(t, "k")
			current := tt.current(k)
			if current != nil {
				put(t, s, *current)
			}
			err := s.Release(t.Context(), k, "lease", []idempotency.Effect{effect(t, in, "undo", "released")})
			call := fmt.Sprintf("Release(%s, effect)", tt.name)
			if tt.wantWin {
				if err != nil {
					t.Fatalf("%s = %v, want nil", call, err)
				}
				wantAbsent(t, s, k)
				wantEffects(t, in, "undo")
				return
			}
			wantConflict(t, call, err, current)
			wantEffects(t, in)
		})
	}
}

// errRejected is the business answer of the suite's rejected effects.
var errRejected = errors.New("storetest: rejected")

// testRejections checks that an effect whose condition fails fails every
// write with a *RejectedError carrying its business answer, and writes
// nothing; and that a failed record condition is a conflict even when an
// effect fails too.
func testRejections(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	wantRejected := func(t *testing.T, call string, err error, index int) {
		t.Helper()
		var rejected *idempotency.RejectedError
		if !errors.As(err, &rejected) || !errors.Is(err, errRejected) {
			t.Fatalf("%s = %v, want a *RejectedError wrapping the effect's answer", call, err)
		}
		if rejected.Index != index {
			t.Errorf("%s: RejectedError.Index = %d, want %d", call, rejected.Index, index)
		}
	}
	t.Run("Commit", func(t *testing.T) {
		s, in := newStore(t)
		rec := completed(key(t, "k"), "a", t0)
		err := s.Commit(t.Context(), rec, []idempotency.Effect{effect(t, in, "pay_a", "a"), in.Require(scope(t)+"missing", errRejected)}, now)
		wantRejected(t, "Commit", err, 1)
		wantAbsent(t, s, rec.Key)
		wantEffects(t, in)
	})
	t.Run("ReserveHolds", func(t *testing.T) {
		s, in := newStore(t)
		put(t, s, completed(key(t, "base"), "b", t0), effect(t, in, "base", "base"))
		rec := reserved(key(t, "k"), "a", "lease", true, t0)
		err := s.Reserve(t.Context(), rec, []idempotency.Effect{in.Require(scope(t)+"base", errRejected), effect(t, in, "hold", "held")}, now)
		if err != nil {
			t.Fatalf("Reserve(holds) = %v, want nil", err)
		}
		wantRecord(t, s, rec)
		wantEffects(t, in, "base", "hold")
	})
	t.Run("ReserveRejected", func(t *testing.T) {
		s, in := newStore(t)
		rec := reserved(key(t, "k"), "a", "lease", true, t0)
		err := s.Reserve(t.Context(), rec, []idempotency.Effect{effect(t, in, "hold", "held"), in.Require(scope(t)+"missing", errRejected)}, now)
		wantRejected(t, "Reserve", err, 1)
		wantAbsent(t, s, rec.Key)
		wantEffects(t, in)
	})
	t.Run("Complete", func(t *testing.T) {
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "lease", true, t0)
		put(t, s, r)
		err := s.Complete(t.Context(), done(r, now), "lease", []idempotency.Effect{in.Require(scope(t)+"missing", errRejected)})
		wantRejected(t, "Complete", err, 0)
		wantRecord(t, s, r)
	})
	t.Run("Release", func(t *testing.T) {
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "lease", true, t0)
		put(t, s, r)
		err := s.Release(t.Context(), r.Key, "lease", []idempotency.Effect{effect(t, in, "undo", "x"), in.Require(scope(t)+"missing", errRejected)})
		wantRejected(t, "Release", err, 1)
		wantRecord(t, s, r)
		wantEffects(t, in)
	})
	t.Run("ConflictFirst", func(t *testing.T) {
		s, in := newStore(t)
		existing := completed(key(t, "k"), "a", t0)
		put(t, s, existing)
		err := s.Commit(t.Context(), completed(existing.Key, "b", t0), []idempotency.Effect{in.Require(scope(t)+"missing", errRejected)}, now)
		wantConflict(t, "Commit(taken key, rejected effect)", err, &existing)
	})
}

// testAdvance checks that Advance moves a held record (IN_PROGRESS or
// UNKNOWN, keeping its status) to a recovery point with its effects, fenced
// on the lease; that the point and data survive a later transition; and that
// a store recognises its own Advance; that a caller holding the lease but
// stating another status gets ErrStatusMismatch, and one stating an invalid
// status a plain error, neither a conflict.
func testAdvance(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	p := idempotency.Progress{
		Point: "charge_created", Data: map[string]string{"order": "ord_1", "charge": "ch_1"},
		LeaseToken: "next-lease", ExpiresAt: now.Add(30 * time.Second), UpdatedAt: now, External: true,
	}
	for _, tt := range leaseTests(now) {
		t.Run(tt.name, func(t *testing.T) {
			s, in := newStore(t)
			k := key(t, "k")
			current := tt.current(k)
			if current != nil {
				put(t, s, *current)
			}
			p := p
			if current != nil && current.Status == idempotency.StatusUnknown {
				p.Status = idempotency.StatusUnknown
			}
			err := s.Advance(t.Context(), k, "lease", p, []idempotency.Effect{effect(t, in, "paid", "x")})
			call := fmt.Sprintf("Advance(%s)", tt.name)
			if !tt.wantWin {
				wantConflict(t, call, err, current)
				wantEffects(t, in)
				return
			}
			if err != nil {
				t.Fatalf("%s = %v, want nil", call, err)
			}
			want := *current
			want.Point, want.Data, want.LeaseToken, want.ExpiresAt, want.UpdatedAt = p.Point, p.Data, p.LeaseToken, p.ExpiresAt, p.UpdatedAt
			if want.Status == idempotency.StatusUnknown {
				// A Resolver resuming the phases after the point: they
				// may call out again (Record.UnknownSince).
				want.UnknownSince = p.UpdatedAt
			}
			wantRecord(t, s, want)
			wantEffects(t, in, "paid")
			// Again: the record now carries the new lease, so the old one
			// is lost, unless the store sees the write is its own.
			if err := s.Advance(t.Context(), k, "lease", p, nil); err != nil {
				t.Errorf("%s again (its own write in place) = %v, want nil", call, err)
			}
			// A later transition keeps the point and the data.
			if err := s.MarkUnknown(t.Context(), k, p.LeaseToken, "third", now.Add(time.Hour), now); err != nil {
				t.Fatalf("MarkUnknown after Advance = %v", err)
			}
			got, err := s.Get(t.Context(), k)
			if err != nil || got.Point != p.Point || !cmp.Equal(got.Data, p.Data) {
				t.Errorf("after MarkUnknown: point %q data %v (%v), want %q %v", got.Point, got.Data, err, p.Point, p.Data)
			}
		})
	}
	t.Run("stale point", func(t *testing.T) {
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "lease", true, t0)
		r.Point, r.Data = "charge_created", map[string]string{"charge": "ch_1"}
		put(t, s, r)
		stale := p
		stale.From = "order_created" // a view of the record before its last phase
		err := s.Advance(t.Context(), r.Key, "lease", stale, []idempotency.Effect{effect(t, in, "again", "x")})
		wantConflict(t, "Advance(from a stale point)", err, &r)
		wantEffects(t, in)
		fresh := p
		fresh.From = "charge_created"
		if err := s.Advance(t.Context(), r.Key, "lease", fresh, nil); err != nil {
			t.Errorf("Advance(from the current point) = %v, want nil", err)
		}
	})
	t.Run("no point given", func(t *testing.T) {
		// A writer that saw the record before its first phase (From "")
		// and holds its lease token is stale once the record is at a
		// point: whatever its status, or whether it is External, it
		// writes nothing, and gets a conflict carrying the record.
		for _, tt := range []struct {
			name     string
			status   idempotency.Status
			external bool
		}{
			{"in progress, external", idempotency.StatusInProgress, true},
			{"in progress, not external", idempotency.StatusInProgress, false},
			{"unknown", idempotency.StatusUnknown, true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				s, in := newStore(t)
				r := reserved(key(t, "k"), "a", "lease", tt.external, t0)
				r.Status = tt.status
				r.Point, r.Data = "order_created", map[string]string{"order": "ord_1"}
				put(t, s, r)
				q := p
				q.From, q.Status, q.External = "", tt.status, tt.external
				err := s.Advance(t.Context(), r.Key, "lease", q, []idempotency.Effect{effect(t, in, "again", "x")})
				wantConflict(t, fmt.Sprintf("Advance(%s record at %q, From \"\")", tt.status, r.Point), err, &r)
				wantEffects(t, in)
				wantRecord(t, s, r)
			})
		}
	})
	t.Run("other status", func(t *testing.T) {
		// A writer that holds the lease token, at the record's point, but
		// takes the record for what it is not (an UNKNOWN record advanced
		// as IN_PROGRESS, or the other way round) writes nothing, and its
		// mistake is ErrStatusMismatch, never a conflict: a reconciler
		// reads a conflict as the record finalised elsewhere and drops it.
		// With another lease, or at another point, it is a conflict.
		// So is one that takes an External record for one that is not, or
		// the other way round (a store keeps them differently).
		for _, tt := range []struct {
			name     string
			stored   idempotency.Status
			told     idempotency.Status
			lease    string // the caller's lease ("lease" is the record's)
			from     string // Progress.From (the record has no point)
			external bool   // the record is External
			toldExt  bool   // Progress.External
			mismatch bool   // ErrStatusMismatch, else a *ConflictError
		}{
			{"unknown as in progress", idempotency.StatusUnknown, idempotency.StatusInProgress, "lease", "", true, true, true},
			{"unknown as unstated", idempotency.StatusUnknown, "", "lease", "", true, true, true},
			{"in progress as unknown", idempotency.StatusInProgress, idempotency.StatusUnknown, "lease", "", true, true, true},
			{"unknown as unstated, lease lost", idempotency.StatusUnknown, "", "other", "", true, true, false},
			{"in progress as unknown, lease lost", idempotency.StatusInProgress, idempotency.StatusUnknown, "other", "", true, true, false},
			{"unknown as unstated, stale point", idempotency.StatusUnknown, "", "lease", "order_created", true, true, false},
			{"not external as external", idempotency.StatusInProgress, idempotency.StatusInProgress, "lease", "", false, true, true},
			{"not external as external, lease lost", idempotency.StatusInProgress, idempotency.StatusInProgress, "other", "", false, true, false},
			{"not external as external, stale point", idempotency.StatusInProgress, idempotency.StatusInProgress, "lease", "order_created", false, true, false},
			{"external as not external", idempotency.StatusInProgress, idempotency.StatusInProgress, "lease", "", true, false, true},
			{"external unknown as not external", idempotency.StatusUnknown, idempotency.StatusUnknown, "lease", "", true, false, true},
			{"external as not external, lease lost", idempotency.StatusInProgress, idempotency.StatusInProgress, "other", "", true, false, false},
			{"external as not external, stale point", idempotency.StatusInProgress, idempotency.StatusInProgress, "lease", "order_created", true, false, false},
		} {
			t.Run(tt.name, func(t *testing.T) {
				s, in := newStore(t)
				r := reserved(key(t, "k"), "a", "lease", tt.external, t0)
				r.Status = tt.stored
				put(t, s, r)
				q := p
				q.Status, q.From, q.External = tt.told, tt.from, tt.toldExt
				err := s.Advance(t.Context(), r.Key, tt.lease, q, []idempotency.Effect{effect(t, in, "paid", "x")})
				call := fmt.Sprintf("Advance(%s record, External %v, lease %q, Status %q, From %q, Progress.External %v)", tt.stored, tt.external, tt.lease, tt.told, tt.from, tt.toldExt)
				if tt.mismatch {
					var conflict *idempotency.ConflictError
					if !errors.Is(err, idempotency.ErrStatusMismatch) || errors.As(err, &conflict) {
						t.Errorf("%s = %v, want ErrStatusMismatch, not a *ConflictError", call, err)
					}
				} else {
					wantConflict(t, call, err, &r)
				}
				wantEffects(t, in)
				wantRecord(t, s, r)
			})
		}
	})
	t.Run("own write of the other kind", func(t *testing.T) {
		// A store recognises its own Advance by what it wrote, External
		// included: the same step, retried as if the record were not
		// External, did not land, and the lease it names is lost.
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "lease", true, t0)
		put(t, s, r)
		if err := s.Advance(t.Context(), r.Key, "lease", p, nil); err != nil {
			t.Fatalf("Advance = %v, want nil", err)
		}
		want, err := s.Get(t.Context(), r.Key)
		if err != nil {
			t.Fatal(err)
		}
		q := p
		q.External = false
		err = s.Advance(t.Context(), r.Key, "lease", q, []idempotency.Effect{effect(t, in, "paid", "x")})
		wantConflict(t, "Advance(again, Progress.External false)", err, &want)
		wantEffects(t, in)
		wantRecord(t, s, want)
	})
	t.Run("invalid status", func(t *testing.T) {
		// A status no recovery point belongs to is the caller's mistake:
		// an error, never a conflict, and nothing written, in every store.
		for _, status := range []idempotency.Status{idempotency.StatusCompleted, "PENDING"} {
			t.Run(string(status), func(t *testing.T) {
				s, in := newStore(t)
				r := reserved(key(t, "k"), "a", "lease", true, t0)
				put(t, s, r)
				q := p
				q.Status = status
				err := s.Advance(t.Context(), r.Key, "lease", q, []idempotency.Effect{effect(t, in, "paid", "x")})
				var conflict *idempotency.ConflictError
				if err == nil || errors.As(err, &conflict) || errors.Is(err, idempotency.ErrStatusMismatch) {
					t.Errorf("Advance(Status %q) = %v, want an error, neither a *ConflictError nor ErrStatusMismatch", status, err)
				}
				wantEffects(t, in)
				wantRecord(t, s, r)
			})
		}
	})
	t.Run("rejected", func(t *testing.T) {
		s, in := newStore(t)
		r := reserved(key(t, "k"), "a", "lease", true, t0)
		put(t, s, r)
		err := s.Advance(t.Context(), r.Key, "lease", p, []idempotency.Effect{in.Require(scope(t)+"missing", errRejected)})
		var rejected *idempotency.RejectedError
		if !errors.As(err, &rejected) || !errors.Is(err, errRejected) {
			t.Fatalf("Advance(rejected effect) = %v, want a *RejectedError", err)
		}
		wantRecord(t, s, r)
	})
}

// testUnknownOutlivesTTL checks that an UNKNOWN record, however it became
// one (restored by Reserve, MarkUnknown, a redrive, a Resolver's Advance),
// is never deleted by the store's TTL, long past its expiry: its request
// may have had its effect elsewhere, and a key freed under it would run the
// request again. It stays, and a new reservation of its key at that time
// conflicts with it. Its completion is deleted by TTL again past its
// retention, as every COMPLETED record is.
func testUnknownOutlivesTTL(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	late := now.Add(10 * 365 * 24 * time.Hour) // long past every expiry, and past a day after it
	p := idempotency.Progress{From: "order_created", Point: "charge_created", Data: map[string]string{"charge": "ch_1"},
		LeaseToken: "advanced", ExpiresAt: now.Add(time.Hour), UpdatedAt: now, Status: idempotency.StatusUnknown, External: true}
	for _, tt := range []struct {
		name string
		// unknown leaves k's record UNKNOWN under the lease token it
		// returns.
		unknown func(t *testing.T, s idempotency.Store, k idempotency.Key) string
	}{
		{"restored", func(t *testing.T, s idempotency.Store, k idempotency.Key) string {
			put(t, s, unknown(reserved(k, "a", "lease", true, now.Add(time.Hour))))
			return "lease"
		}},
		{"MarkUnknown", func(t *testing.T, s idempotency.Store, k idempotency.Key) string {
			put(t, s, reserved(k, "a", "lease", true, now.Add(30*time.Second)))
			if err := s.MarkUnknown(t.Context(), k, "lease", "unknown", now.Add(time.Hour), now); err != nil {
				t.Fatalf("MarkUnknown = %v", err)
			}
			return "unknown"
		}},
		{"redriven", func(t *testing.T, s idempotency.Store, k idempotency.Key) string {
			put(t, s, unknown(reserved(k, "a", "lease", true, now.Add(time.Hour))))
			if err := s.MarkUnknown(t.Context(), k, "lease", "redriven", now.Add(2*time.Hour), now); err != nil {
				t.Fatalf("MarkUnknown(UNKNOWN) = %v", err)
			}
			return "redriven"
		}},
		{"advanced", func(t *testing.T, s idempotency.Store, k idempotency.Key) string {
			r := unknown(reserved(k, "a", "lease", true, now.Add(time.Hour)))
			r.Point = "order_created"
			put(t, s, r)
			if err := s.Advance(t.Context(), k, "lease", p, nil); err != nil {
				t.Fatalf("Advance(UNKNOWN) = %v", err)
			}
			return p.LeaseToken
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, in := newStore(t)
			k := key(t, "k")
			lease := tt.unknown(t, s, k)
			before, err := s.Get(t.Context(), k)
			if err != nil || before.Status != idempotency.StatusUnknown {
				t.Fatalf("Get = %s, %v; want the UNKNOWN record", before.Status, err)
			}
			if in.ExpireTTL != nil && in.ExpireTTL(t, k, late) {
				t.Errorf("the store's TTL deleted an UNKNOWN record %v past its expiry", late.Sub(before.ExpiresAt).Round(time.Hour))
			}
			wantRecord(t, s, before)
			err = s.Reserve(t.Context(), reserved(k, "a", "retry", true, late.Add(time.Minute)), nil, late)
			wantConflict(t, "Reserve(the UNKNOWN record's key, long past its expiry)", err, &before)

			// Reconciled: completed, and deleted by TTL past its retention.
			c := done(before, now)
			if err := s.Complete(t.Context(), c, lease, nil); err != nil {
				t.Fatalf("Complete = %v", err)
			}
			if in.ExpireTTL != nil {
				if in.ExpireTTL(t, k, c.ExpiresAt.Add(-time.Second)) {
					t.Errorf("the store's TTL deleted the COMPLETED record before its expiry")
				}
				if !in.ExpireTTL(t, k, late) {
					t.Errorf("the store's TTL kept the COMPLETED record %v past its expiry, want it deleted", late.Sub(c.ExpiresAt).Round(time.Hour))
				}
			}
		})
	}
}

// testExternalOutlivesTTL checks that an External reservation, however it
// was written (Reserve, with holds or not; Advance of a step, of a
// take-over, of a pause that gives the lease up), is never deleted by the
// store's TTL, long past its lease: its request may have called the other
// system, and a key freed under it would run the request again before its
// reconciliation. It stays, and a new reservation of its key at that time
// conflicts with it (the lease check, or a client's redrive, hands it to
// the reconciler). A reservation that is not External keeps its TTL: its
// key is reclaimable at its expiry anyway.
func testExternalOutlivesTTL(t *testing.T, newStore NewStore) {
	now := t0.Add(-10 * time.Second)
	late := now.Add(10 * 365 * 24 * time.Hour) // long past every lease, and past a day after it
	step := func(from, point string, lease time.Time, external bool) idempotency.Progress {
		return idempotency.Progress{From: from, Point: point, Data: map[string]string{"order": "ord_1"},
			LeaseToken: "advanced", ExpiresAt: lease, UpdatedAt: now, External: external}
	}
	for _, tt := range []struct {
		name     string
		external bool
		// write leaves k's record IN_PROGRESS.
		write func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool)
	}{
		{"reserved", true, func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool) {
			put(t, s, reserved(k, "a", "lease", external, now.Add(30*time.Second)))
		}},
		{"reserved with holds", true, func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool) {
			put(t, s, reserved(k, "a", "lease", external, now.Add(30*time.Second)), effect(t, in, "hold", "x"))
		}},
		{"advanced", true, func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool) {
			put(t, s, reserved(k, "a", "lease", external, now.Add(30*time.Second)))
			p := step("", "order_created", now.Add(30*time.Second), external)
			if err := s.Advance(t.Context(), k, "lease", p, []idempotency.Effect{effect(t, in, "order", "x")}); err != nil {
				t.Fatalf("Advance = %v", err)
			}
		}},
		{"taken over", true, func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool) {
			r := reserved(k, "a", "lease", external, now.Add(30*time.Second))
			r.Point = "order_created"
			put(t, s, r)
			if err := s.Advance(t.Context(), k, "lease", step("order_created", "order_created", now.Add(time.Minute), external), nil); err != nil {
				t.Fatalf("Advance(take-over) = %v", err)
			}
		}},
		{"paused", true, func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool) {
			r := reserved(k, "a", "lease", external, now.Add(30*time.Second))
			r.Point = "order_created"
			put(t, s, r)
			if err := s.Advance(t.Context(), k, "lease", step("order_created", "order_created", now, external), nil); err != nil {
				t.Fatalf("Advance(pause) = %v", err)
			}
		}},
		{"not external, reserved", false, func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool) {
			put(t, s, reserved(k, "a", "lease", external, now.Add(30*time.Second)))
		}},
		{"not external, advanced", false, func(t *testing.T, s idempotency.Store, in Inspect, k idempotency.Key, external bool) {
			put(t, s, reserved(k, "a", "lease", external, now.Add(30*time.Second)))
			if err := s.Advance(t.Context(), k, "lease", step("", "order_created", now.Add(30*time.Second), external), nil); err != nil {
				t.Fatalf("Advance = %v", err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, in := newStore(t)
			k := key(t, "k")
			tt.write(t, s, in, k, tt.external)
			before, err := s.Get(t.Context(), k)
			if err != nil || before.Status != idempotency.StatusInProgress || before.External != tt.external {
				t.Fatalf("Get = %s (External %v), %v; want the reservation (External %v)", before.Status, before.External, err, tt.external)
			}
			if in.ExpireTTL != nil && in.ExpireTTL(t, k, before.ExpiresAt.Add(-time.Second)) {
				t.Fatalf("the store's TTL deleted the reservation before its lease ran out")
			}
			if !tt.external {
				// Its key is free at its expiry; the store's TTL may
				// delete it, and does in a store that has one.
				if in.ExpireTTL != nil && !in.ExpireTTL(t, k, late) {
					t.Errorf("the store's TTL kept a reservation that is not External %v past its lease, want it deleted", late.Sub(before.ExpiresAt).Round(time.Hour))
				}
				if err := s.Reserve(t.Context(), reserved(k, "a", "retry", false, late.Add(time.Minute)), nil, late); err != nil {
					t.Errorf("Reserve(the key of a reservation that is not External, past its lease) = %v, want nil", err)
				}
				return
			}
			if in.ExpireTTL != nil && in.ExpireTTL(t, k, late) {
				t.Errorf("the store's TTL deleted an External reservation %v past its lease", late.Sub(before.ExpiresAt).Round(time.Hour))
			}
			wantRecord(t, s, before)
			err = s.Reserve(t.Context(), reserved(k, "a", "retry", true, late.Add(time.Minute)), nil, late)
			wantConflict(t, "Reserve(the External reservation's key, long past its lease)", err, &before)

			// Handed to the reconciler: UNKNOWN, kept as well.
			if err := s.MarkUnknown(t.Context(), k, before.LeaseToken, "unknown", late.Add(time.Hour), late); err != nil {
				t.Fatalf("MarkUnknown = %v", err)
			}
			if in.ExpireTTL != nil && in.ExpireTTL(t, k, late.Add(365*24*time.Hour)) {
				t.Errorf("the store's TTL deleted the UNKNOWN record")
			}
		})
	}
}

// testLargeBodies checks that answers of 1 MB, compressible or not, are
// stored and come back byte for byte: from Get, from a conflict, and after a
// completion under a lease.
func testLargeBodies(t *testing.T, newStore NewStore) {
	random := make([]byte, 1<<20)
	rng := mrand.New(mrand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	text := []byte(`{"items":[` + strings.Repeat(`{"id":"item_0123456789","amount":1999,"currency":"usd"},`, 1<<20/56) + `{}]}`)
	for _, body := range []struct {
		name string
		b    []byte
	}{{"compressible", text}, {"incompressible", random}} {
		t.Run(body.name, func(t *testing.T) {
			s, _ := newStore(t)
			rec := completed(key(t, "k"), "a", t0)
			rec.Response.Body = body.b
			if err := s.Commit(t.Context(), rec, nil, t0.Add(-time.Hour)); err != nil {
				t.Fatalf("Commit(%d bytes) = %v", len(body.b), err)
			}
			wantRecord(t, s, rec)
			err := s.Commit(t.Context(), completed(rec.Key, "b", t0), nil, t0.Add(-time.Hour))
			wantConflict(t, "Commit(taken key)", err, &rec)

			r := reserved(key(t, "leased"), "a", "lease", true, t0)
			put(t, s, r)
			d := done(r, t0.Add(-time.Minute))
			d.Response.Body = body.b
			if err := s.Complete(t.Context(), d, "lease", nil); err != nil {
				t.Fatalf("Complete(%d bytes) = %v", len(body.b), err)
			}
			wantRecord(t, s, d)
		})
	}
}
