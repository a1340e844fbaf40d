package memory_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/bounds"
	"github.com/oncehq/once/idempotency/memory"
)

// TestDynamoDBBounds: the in-memory store refuses what the DynamoDB store
// refuses, with errors matching the same sentinels, and writes nothing: more
// than 100 items in one write (the record, its answer's chunks and the
// effects), an answer over MaxStoredBody once compressed, a reservation's
// request over MaxRequest or data over MaxData, a step adding more than
// MaxData. Within the bounds, each write goes through.
func TestDynamoDBBounds(t *testing.T) {
	now := time.Now()
	key := idempotency.NewKey("acme", "k")
	effects := func(n int) []idempotency.Effect {
		out := make([]idempotency.Effect, n)
		for i := range out {
			out[i] = memory.Insert("items", fmt.Sprint(i), i)
		}
		return out
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return b
	}
	reservation := func() idempotency.Record {
		return idempotency.Record{Key: key, Status: idempotency.StatusInProgress, Route: "POST /v1/x", Fingerprint: "f",
			LeaseToken: "lease", ExpiresAt: now.Add(time.Minute), CreatedAt: now, UpdatedAt: now}
	}
	completed := func(body []byte) idempotency.Record {
		rec := reservation()
		rec.Status, rec.ExpiresAt = idempotency.StatusCompleted, now.Add(time.Hour)
		rec.Response = &idempotency.Response{Status: 201, Body: body}
		return rec
	}
	reserved := func(t *testing.T, s *memory.Store) {
		t.Helper()
		if err := s.Reserve(t.Context(), reservation(), nil, now); err != nil {
			t.Fatal(err)
		}
	}
	bigData := map[string]string{"d": strings.Repeat("x", bounds.MaxData)}
	tests := []struct {
		name  string
		setup func(*testing.T, *memory.Store)
		write func(*testing.T, *memory.Store) error
		want  error // nil: the write goes through
	}{
		{"commit, 99 effects", nil, func(t *testing.T, s *memory.Store) error {
			return s.Commit(t.Context(), completed([]byte("{}")), effects(99), now)
		}, nil},
		{"commit, 100 effects", nil, func(t *testing.T, s *memory.Store) error {
			return s.Commit(t.Context(), completed([]byte("{}")), effects(100), now)
		}, idempotency.ErrResponseTooLarge},
		{"commit, a body in 2 chunks and 98 effects", nil, func(t *testing.T, s *memory.Store) error {
			return s.Commit(t.Context(), completed(random(bounds.MaxItem+1)), effects(98), now)
		}, idempotency.ErrResponseTooLarge},
		{"commit, a body in 2 chunks and 97 effects", nil, func(t *testing.T, s *memory.Store) error {
			return s.Commit(t.Context(), completed(random(bounds.MaxItem+1)), effects(97), now)
		}, nil},
		{"commit, a body over MaxStoredBody", nil, func(t *testing.T, s *memory.Store) error {
			return s.Commit(t.Context(), completed(random(bounds.MaxStoredBody+1)), nil, now)
		}, idempotency.ErrResponseTooLarge},
		{"commit, a large body that compresses", nil, func(t *testing.T, s *memory.Store) error {
			return s.Commit(t.Context(), completed([]byte(strings.Repeat("a", bounds.MaxStoredBody+1))), nil, now)
		}, nil},
		{"reserve, 100 holds", nil, func(t *testing.T, s *memory.Store) error {
			return s.Reserve(t.Context(), reservation(), effects(100), now)
		}, idempotency.ErrResponseTooLarge},
		{"reserve, request over MaxRequest", nil, func(t *testing.T, s *memory.Store) error {
			rec := reservation()
			rec.External, rec.Request = true, []byte(`"`+strings.Repeat("x", bounds.MaxRequest)+`"`)
			return s.Reserve(t.Context(), rec, nil, now)
		}, idempotency.ErrBodyTooLarge},
		{"reserve, data over MaxData", nil, func(t *testing.T, s *memory.Store) error {
			rec := reservation()
			rec.External, rec.Point, rec.Data = true, "start", bigData
			return s.Reserve(t.Context(), rec, nil, now)
		}, bounds.ErrDataTooLarge},
		{"complete, 100 effects", reserved, func(t *testing.T, s *memory.Store) error {
			return s.Complete(t.Context(), completed([]byte("{}")), "lease", effects(100))
		}, idempotency.ErrResponseTooLarge},
		{"complete, 99 effects", reserved, func(t *testing.T, s *memory.Store) error {
			return s.Complete(t.Context(), completed([]byte("{}")), "lease", effects(99))
		}, nil},
		{"complete, a body over MaxStoredBody", reserved, func(t *testing.T, s *memory.Store) error {
			return s.Complete(t.Context(), completed(random(bounds.MaxStoredBody+1)), "lease", nil)
		}, idempotency.ErrResponseTooLarge},
		{"release, 100 effects", reserved, func(t *testing.T, s *memory.Store) error {
			return s.Release(t.Context(), key, "lease", effects(100))
		}, idempotency.ErrResponseTooLarge},
		{"advance, 100 effects", reserved, func(t *testing.T, s *memory.Store) error {
			return s.Advance(t.Context(), key, "lease", idempotency.Progress{Point: "p", LeaseToken: "lease", ExpiresAt: now.Add(time.Minute), UpdatedAt: now}, effects(100))
		}, idempotency.ErrResponseTooLarge},
		{"advance, data over MaxData", reserved, func(t *testing.T, s *memory.Store) error {
			return s.Advance(t.Context(), key, "lease", idempotency.Progress{Point: "p", Data: bigData, Added: bigData, LeaseToken: "lease", ExpiresAt: now.Add(time.Minute), UpdatedAt: now}, nil)
		}, bounds.ErrDataTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := memory.New()
			if tt.setup != nil {
				tt.setup(t, s)
			}
			before, _ := s.Get(t.Context(), key)
			err := tt.write(t, s)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("write = %v, want it to go through", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("write = %v, want an error matching %v", err, tt.want)
			}
			if after, _ := s.Get(t.Context(), key); after.Status != before.Status || after.UpdatedAt != before.UpdatedAt || after.Point != before.Point {
				t.Errorf("record after a refused write = %+v, want it as before, %+v", after, before)
			}
			if n := len(s.Items("items")); n != 0 {
				t.Errorf("%d effect items written, want none", n)
			}
		})
	}
}
