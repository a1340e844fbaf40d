package memory

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/bounds"
)

// Effect is the in-memory store's idempotency.Effect: a change of the item
// under Key in Table, applied in the same atomic step as the record's
// transition.
type Effect struct {
	// Table and Key name the item.
	Table, Key string
	// Apply returns the item's next value and whether it exists afterwards,
	// given its current value (nil and false when absent). An error fails
	// the effect's condition: the store then writes nothing and returns a
	// *idempotency.RejectedError whose Err is that error.
	Apply func(current any, exists bool) (next any, keep bool, err error)
}

// EffectTable names the effect's table.
func (e Effect) EffectTable() string { return e.Table }

// Insert is an Effect that stores item under key in table, and fails (an
// error that answers 500) when an item is there already.
func Insert(table, key string, item any) Effect {
	return Effect{Table: table, Key: key, Apply: func(_ any, exists bool) (any, bool, error) {
		if exists {
			return nil, false, fmt.Errorf("memory: item %s %q already exists", table, key)
		}
		return item, true, nil
	}}
}

// Require is an Effect that writes nothing and fails with reject when no
// item is under key in table.
func Require(table, key string, reject error) Effect {
	return Effect{Table: table, Key: key, Apply: func(current any, exists bool) (any, bool, error) {
		if !exists {
			return nil, false, reject
		}
		return current, true, nil
	}}
}

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
	if err := checkWrite("commit", &rec, len(effects)); err != nil {
		return err
	}
	rec = normalize(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if landed, err := s.reclaimable(rec, now); landed || err != nil {
		return err
	}
	writes, err := s.applyEffects("commit", effects)
	if err != nil {
		return err
	}
	s.records[rec.Key.ID()] = rec
	s.write(writes)
	return nil
}

// Reserve writes rec and effects under Commit's condition, returning the
// errors Commit returns.
func (s *Store) Reserve(ctx context.Context, rec idempotency.Record, effects []idempotency.Effect, now time.Time) error {
	if rec.Status == idempotency.StatusInProgress {
		if err := bounds.CheckRecord(rec); err != nil {
			return fmt.Errorf("memory: reserve: %w", err)
		}
	}
	if err := checkWrite("reserve", nil, len(effects)); err != nil {
		return err
	}
	rec = normalize(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if landed, err := s.reclaimable(rec, now); landed || err != nil {
		return err
	}
	writes, err := s.applyEffects("reserve", effects)
	if err != nil {
		return err
	}
	s.records[rec.Key.ID()] = rec
	s.write(writes)
	return nil
}

// Complete replaces the record held under lease with rec, which must be
// COMPLETED, and writes effects, atomically. When the lease is not held it
// returns a *idempotency.ConflictError carrying the current record (nil
// Existing when there is none); when an effect's item exists, an error;
// when rec is of another status, an error wrapping
// idempotency.ErrNotCompleted. Either way it writes nothing.
func (s *Store) Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error {
	if rec.Status != idempotency.StatusCompleted {
		return fmt.Errorf("memory: complete: %w: the record is %q", idempotency.ErrNotCompleted, rec.Status)
	}
	if err := checkWrite("complete", &rec, len(effects)); err != nil {
		return err
	}
	rec = normalize(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if landed, err := s.held(rec.Key, lease, sameAs(rec)); landed || err != nil {
		return err
	}
	writes, err := s.applyEffects("complete", effects)
	if err != nil {
		return err
	}
	s.records[rec.Key.ID()] = rec
	s.write(writes)
	return nil
}

// Release deletes the record held under lease and writes effects,
// atomically, returning the errors Complete returns.
func (s *Store) Release(ctx context.Context, key idempotency.Key, lease string, effects []idempotency.Effect) error {
	if err := checkWrite("release", nil, len(effects)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.held(key, lease, nil); err != nil {
		return err
	}
	writes, err := s.applyEffects("release", effects)
	if err != nil {
		return err
	}
	delete(s.records, key.ID())
	s.write(writes)
	return nil
}

// Advance moves the record held under lease, of the status p.Status
// (IN_PROGRESS when empty) and External as p.External says, to the
// recovery point p and writes effects, atomically, returning the errors
// Complete returns, or one wrapping idempotency.ErrStatusMismatch for a
// record held under lease at p.From but of another status or External.
func (s *Store) Advance(ctx context.Context, key idempotency.Key, lease string, p idempotency.Progress, effects []idempotency.Effect) error {
	if err := bounds.CheckProgress(p); err != nil {
		return fmt.Errorf("memory: advance: %w", err)
	}
	if err := checkWrite("advance", nil, len(effects)); err != nil {
		return err
	}
	status, err := p.RecordStatus()
	if err != nil {
		return fmt.Errorf("memory: advance: %w", err)
	}
	expiresAt, now := millis(p.ExpiresAt), millis(p.UpdatedAt)
	landed := func(r idempotency.Record) bool {
		return r.Status == status && r.External == p.External && r.Point == p.Point && r.LeaseToken == p.LeaseToken && r.UpdatedAt.Equal(now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if done, err := s.held(key, lease, landed); done || err != nil {
		return err
	}
	cur := s.records[key.ID()]
	if cur.Point != p.From {
		c := clone(cur)
		return &idempotency.ConflictError{Existing: &c}
	}
	if cur.Status != status {
		// Held under the caller's lease at p.From: the caller's mistake,
		// not a lost lease (see idempotency.ErrStatusMismatch).
		return fmt.Errorf("memory: advance: %w: the record is %s, Progress.Status %s", idempotency.ErrStatusMismatch, cur.Status, status)
	}
	if cur.External != p.External {
		return fmt.Errorf("memory: advance: %w: the record's External is %v, Progress.External %v", idempotency.ErrStatusMismatch, cur.External, p.External)
	}
	writes, err := s.applyEffects("advance", effects)
	if err != nil {
		return err
	}
	rec := s.records[key.ID()]
	rec.Point = p.Point
	rec.Data = maps.Clone(p.Data)
	if len(rec.Data) == 0 {
		rec.Data = nil
	}
	rec.LeaseToken = p.LeaseToken
	rec.ExpiresAt = expiresAt
	rec.UpdatedAt = now
	if status == idempotency.StatusUnknown {
		// A Resolver resuming the phases after p.Point: they may call
		// out again (Record.UnknownSince).
		rec.UnknownSince = now
	}
	s.records[key.ID()] = rec
	s.write(writes)
	return nil
}

// MarkUnknown moves the record held under lease to UNKNOWN with newLease and
// expiresAt, returning a *idempotency.ConflictError as Complete does when the
// lease is not held. The record's UnknownSince becomes now unless it has
// one: it was UNKNOWN already (a redrive), and keeps when it first went so.
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
	if rec.UnknownSince.IsZero() {
		rec.UnknownSince = now
	}
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

// Items returns the effect items written to table, by key: the values the
// effects stored, not copies. The map itself is a copy.
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

// itemWrite is an effect's outcome: the item's next value, or its removal.
type itemWrite struct {
	table, key string
	next       any
	keep       bool
}

// restoreMarks is the effect table of the marks of restores (RestoreMark).
const restoreMarks = "restore-marks"

// RestoreMark returns the effect that marks the stream REMOVE named id of
// key's record, for recovery.Sweeper (a recovery.RestoreMarker), as the
// DynamoDB store's does: an item of the restoreMarks table
// ("restore-marks") that fails Reserve with an *idempotency.RejectedError
// when it exists already. The in-memory store keeps it for good; expiresAt
// is the DynamoDB store's TTL.
func (s *Store) RestoreMark(key idempotency.Key, id string, expiresAt time.Time) idempotency.Effect {
	return Insert(restoreMarks, key.ID()+"#restored#"+id, expiresAt)
}

// Mark writes the mark of the REMOVE named id of key's record on its own,
// unless it exists already.
func (s *Store) Mark(ctx context.Context, key idempotency.Key, id string, expiresAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.items[restoreMarks] == nil {
		s.items[restoreMarks] = map[string]any{}
	}
	k := key.ID() + "#restored#" + id
	if _, ok := s.items[restoreMarks][k]; !ok {
		s.items[restoreMarks][k] = expiresAt
	}
	return nil
}

// Marked reports whether the REMOVE named id of key's record was handled
// before: its mark (RestoreMark, Mark) exists.
func (s *Store) Marked(ctx context.Context, key idempotency.Key, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.items[restoreMarks][key.ID()+"#restored#"+id]
	return ok, nil
}

// applyEffects computes the effects' writes without applying them. It fails
// with a *idempotency.RejectedError when an effect's condition fails, and
// with another error when an effect is not the store's or two effects name
// the same item (which DynamoDB refuses in one transaction). s.mu is held.
func (s *Store) applyEffects(op string, effects []idempotency.Effect) ([]itemWrite, error) {
	seen := map[[2]string]bool{}
	writes := make([]itemWrite, 0, len(effects))
	for i, e := range effects {
		me, ok := e.(Effect)
		if !ok {
			return nil, fmt.Errorf("memory: %s: effect %d is a %T, not a memory.Effect", op, i, e)
		}
		k := [2]string{me.Table, me.Key}
		if seen[k] {
			return nil, fmt.Errorf("memory: %s: two effects write item %s %q", op, me.Table, me.Key)
		}
		seen[k] = true
		current, exists := s.items[me.Table][me.Key]
		next, keep, err := me.Apply(current, exists)
		if err != nil {
			return nil, &idempotency.RejectedError{Index: i, Table: me.Table, Err: err}
		}
		writes = append(writes, itemWrite{table: me.Table, key: me.Key, next: next, keep: keep})
	}
	return writes, nil
}

// write applies writes. s.mu is held.
func (s *Store) write(writes []itemWrite) {
	for _, w := range writes {
		if !w.keep {
			delete(s.items[w.table], w.key)
			continue
		}
		if s.items[w.table] == nil {
			s.items[w.table] = map[string]any{}
		}
		s.items[w.table][w.key] = w.next
	}
}

// normalize returns a copy of rec as the DynamoDB store keeps it.
func normalize(rec idempotency.Record) idempotency.Record {
	rec = clone(rec)
	rec.ExpiresAt = millis(rec.ExpiresAt)
	rec.CreatedAt = millis(rec.CreatedAt)
	rec.UpdatedAt = millis(rec.UpdatedAt)
	rec.UnknownSince = millis(rec.UnknownSince)
	if rec.Status != idempotency.StatusUnknown {
		rec.UnknownSince = time.Time{} // kept on UNKNOWN records only
	}
	if len(rec.Request) == 0 {
		rec.Request = nil
	}
	if len(rec.Data) == 0 {
		rec.Data = nil
	}
	if r := rec.Response; r != nil {
		if len(r.Header) == 0 {
			r.Header = nil
		}
		if len(r.SetCookie) == 0 {
			r.SetCookie = nil
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
	rec.Data = maps.Clone(rec.Data)
	if r := rec.Response; r != nil {
		rec.Response = &idempotency.Response{
			Status:    r.Status,
			Header:    maps.Clone(r.Header),
			SetCookie: slices.Clone(r.SetCookie),
			Body:      bytes.Clone(r.Body),
		}
	}
	return rec
}
