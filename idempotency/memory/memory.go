package memory

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	"github.com/oncehq/once/idempotency"
)

// Store is an in-memory idempotency.Store. The zero value is not usable; call
// New.
type Store struct {
	mu      sync.Mutex
	records map[string]idempotency.Record // by Key.ID()
	items   map[string]map[string]any     // effect items by table, then key
}

var _ idempotency.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{records: map[string]idempotency.Record{}, items: map[string]map[string]any{}}
}

// Commit writes rec and effects atomically when no record for rec.Key exists
// or the existing one is reclaimable at now. It returns a
// *idempotency.ConflictError carrying the existing record otherwise, and an
// error when an effect's item already exists, writing nothing in either case.
func (s *Store) Commit(ctx context.Context, rec idempotency.Record, effects []idempotency.Effect, now time.Time) error {
	rec = normalize(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if landed, err := s.reclaimable(rec, now); landed || err != nil {
		return err
	}
	if err := s.checkEffects(effects); err != nil {
		return fmt.Errorf("memory: commit: %w", err)
	}
	s.records[rec.Key.ID()] = rec
	s.writeEffects(effects)
	return nil
}

// Reserve writes rec under Commit's condition, returning a
// *idempotency.ConflictError carrying the existing record otherwise.
func (s *Store) Reserve(ctx context.Context, rec idempotency.Record, now time.Time) error {
	rec = normalize(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if landed, err := s.reclaimable(rec, now); landed || err != nil {
		return err
	}
	s.records[rec.Key.ID()] = rec
	return nil
}

// Complete replaces the record held under lease with rec and writes effects,
// atomically. When the lease is not held it returns a
// *idempotency.ConflictError carrying the current record (nil Existing when
// there is none); when an effect's item exists, an error. Either way it writes
// nothing.
func (s *Store) Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error {
	rec = normalize(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if landed, err := s.held(rec.Key, lease, sameAs(rec)); landed || err != nil {
		return err
	}
	if err := s.checkEffects(effects); err != nil {
		return fmt.Errorf("memory: complete: %w", err)
	}
	s.records[rec.Key.ID()] = rec
	s.writeEffects(effects)
	return nil
}

// Release deletes the record held under lease, returning a
// *idempotency.ConflictError as Complete does when the lease is not held.
func (s *Store) Release(ctx context.Context, key idempotency.Key, lease string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.held(key, lease, nil); err != nil {
		return err
	}
	delete(s.records, key.ID())
	return nil
}

// MarkUnknown moves the record held under lease to UNKNOWN with newLease and
// expiresAt, returning a *idempotency.ConflictError as Complete does when the
// lease is not held.
func (s *Store) MarkUnknown(ctx context.Context, key idempotency.Key, lease, newLease string, expiresAt, now time.Time) error {
	expiresAt, now = millis(expiresAt), millis(now)
	landed := func(r idempotency.Record) bool {
		return r.Status == idempotency.StatusUnknown && r.LeaseToken == newLease &&
			r.ExpiresAt.Equal(expiresAt) && r.UpdatedAt.Equal(now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if landed, err := s.held(key, lease, landed); landed || err != nil {
		return err
	}
	rec := s.records[key.ID()]
	rec.Status = idempotency.StatusUnknown
	rec.LeaseToken = newLease
	rec.ExpiresAt = expiresAt
	rec.UpdatedAt = now
	s.records[key.ID()] = rec
	return nil
}

// Get returns a copy of the record for key, or an error wrapping
// idempotency.ErrNotFound.
func (s *Store) Get(ctx context.Context, key idempotency.Key) (idempotency.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[key.ID()]
	if !ok {
		return idempotency.Record{}, fmt.Errorf("memory: get: %w", idempotency.ErrNotFound)
	}
	return clone(rec), nil
}

// Items returns the effect items written to table, by key: the values passed
// as Effect.Item, not copies. The map itself is a copy.
func (s *Store) Items(table string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.items[table])
}

// reclaimable checks Commit's and Reserve's condition. When it does not hold
// it returns a *idempotency.ConflictError, or done when the record in place is
// rec itself. s.mu is held.
func (s *Store) reclaimable(rec idempotency.Record, now time.Time) (done bool, err error) {
	existing, ok := s.records[rec.Key.ID()]
	if !ok || existing.Reclaimable(millis(now)) {
		return false, nil
	}
	if sameAs(rec)(existing) {
		return true, nil
	}
	c := clone(existing)
	return false, &idempotency.ConflictError{Existing: &c}
}

// held checks the lease condition: the record exists, carries lease and is
// not COMPLETED. When it does not hold it returns a *idempotency.ConflictError,
// or done when landed recognises the record as the call's own write, already
// in place. s.mu is held.
func (s *Store) held(key idempotency.Key, lease string, landed func(idempotency.Record) bool) (done bool, err error) {
	existing, ok := s.records[key.ID()]
	if !ok {
		return false, &idempotency.ConflictError{}
	}
	if existing.LeaseToken == lease && existing.Status != idempotency.StatusCompleted {
		return false, nil
	}
	if landed != nil && landed(existing) {
		return true, nil
	}
	c := clone(existing)
	return false, &idempotency.ConflictError{Existing: &c}
}

// sameAs recognises rec, a write carrying a lease token, as already stored:
// how the DynamoDB store recognises its own write after a lost response.
func sameAs(rec idempotency.Record) func(idempotency.Record) bool {
	return func(existing idempotency.Record) bool {
		return rec.LeaseToken != "" && reflect.DeepEqual(existing, rec)
	}
}

// checkEffects fails when an effect's item exists, or when two effects
// write the same item (which DynamoDB refuses in one transaction). s.mu is
// held.
func (s *Store) checkEffects(effects []idempotency.Effect) error {
	seen := map[[2]string]bool{}
	for _, e := range effects {
		k := [2]string{e.Table, e.Key}
		if seen[k] {
			return fmt.Errorf("two effects write item %s %s=%q", e.Table, e.KeyAttr, e.Key)
		}
		seen[k] = true
		if _, ok := s.items[e.Table][e.Key]; ok {
			return fmt.Errorf("effect item %s %s=%q already exists", e.Table, e.KeyAttr, e.Key)
		}
	}
	return nil
}

// writeEffects stores effects' items. s.mu is held.
func (s *Store) writeEffects(effects []idempotency.Effect) {
	for _, e := range effects {
		if s.items[e.Table] == nil {
			s.items[e.Table] = map[string]any{}
		}
		s.items[e.Table][e.Key] = e.Item
	}
}

// normalize returns a copy of rec as the DynamoDB store keeps it.
func normalize(rec idempotency.Record) idempotency.Record {
	rec = clone(rec)
	rec.ExpiresAt = millis(rec.ExpiresAt)
	rec.CreatedAt = millis(rec.CreatedAt)
	rec.UpdatedAt = millis(rec.UpdatedAt)
	if len(rec.Request) == 0 {
		rec.Request = nil
	}
	if r := rec.Response; r != nil {
		if len(r.Header) == 0 {
			r.Header = nil
		}
		if r.Body == nil {
			r.Body = []byte{}
		}
	}
	return rec
}

// millis truncates t to the millisecond, in UTC; the zero time stays zero.
func millis(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// clone returns a deep copy of rec.
func clone(rec idempotency.Record) idempotency.Record {
	rec.Request = bytes.Clone(rec.Request)
	if r := rec.Response; r != nil {
		rec.Response = &idempotency.Response{
			Status: r.Status,
			Header: maps.Clone(r.Header),
			Body:   bytes.Clone(r.Body),
		}
	}
	return rec
}
