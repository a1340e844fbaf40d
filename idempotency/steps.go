package idempotency

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
)

// Steps is a multi-step request's way through its recovery points (Brandur
// Leach's atomic phases). Each phase makes at most one call to another
// system, then commits its local effects together with the record's new
// recovery point and what it learned (Data), in one transaction fenced on
// the lease (Advance). A request that dies between two phases leaves its
// record at the last point it committed; whoever resumes it (a retry of the
// same request, which takes the lease over, or the route's Resolver, run by
// the reconciler) starts from that point with that data and never repeats a
// committed phase's effects: each Advance is fenced on the lease and on the
// point its writer went on from, so a stale view (a redelivered stream image
// of an earlier point) cannot commit a phase twice. A phase that is run
// again after a crash repeats
// its call out, so the call must be idempotent at the other system (send it
// with Steps.ForwardKey).
//
// A handler gets its Steps from BeginAt (Call.Steps); a Resolver resuming an
// abandoned request gets them from ResumeSteps.
type Steps struct {
	store Store
	key   Key
	rec   Record // the record as the steps found it; Point, Data and LeaseToken follow Advance
	renew func(now time.Time) time.Time
	now   func() time.Time
	hook  func(ctx context.Context, point string)
	timed func(func() error) error
	// lost is the conflict of an Advance that found the lease lost: the
	// middleware then answers from the store, whatever the handler wrote.
	lost *ConflictError
}

// ResumeSteps returns the Steps of the request recorded in rec, an UNKNOWN
// record handed to a Resolver, resuming at rec.Point under rec's lease token.
// Its Advance keeps the record's expiry (an UNKNOWN record's retention).
// now is time.Now when nil.
func ResumeSteps(store Store, rec Record, now func() time.Time) *Steps {
	if now == nil {
		now = time.Now
	}
	expiry := rec.ExpiresAt
	return &Steps{
		store: store, key: rec.Key, rec: cloneRecord(rec), now: now,
		renew: func(time.Time) time.Time { return expiry },
		hook:  func(context.Context, string) {},
		timed: func(f func() error) error { return f() },
	}
}

// Point is the recovery point reached: the first phase still to run follows
// it.
func (s *Steps) Point() string { return s.rec.Point }

// Data returns a copy of what the committed phases recorded.
func (s *Steps) Data() map[string]string { return maps.Clone(s.rec.Data) }

// Record is the request's record as the steps hold it: its key, canonical
// request and creation time (for building answers a Resolver can rebuild),
// and its current point and data.
func (s *Steps) Record() Record { return cloneRecord(s.rec) }

// ForwardKey is the idempotency key to send to another system for the call
// of the phase that leads to point: stable for the request and the phase,
// distinct across phases, so that two calls of one request (a charge and a
// refund) are two operations there, and a phase run again is the same one.
func (s *Steps) ForwardKey(point string) string {
	return s.key.Forward(s.rec.Fingerprint + "\x00" + point)
}

// Advance commits point: effects, the point and data (merged into what
// earlier phases recorded), and a renewed lease, in one transaction fenced
// on the lease token. A *ConflictError means the lease is lost (a newer
// owner took the request over, or it was finished elsewhere): the phase's
// effects did not happen, and the caller must stop without answering
// anything of its own (a handler returns; the middleware answers from the
// store's state). A *RejectedError carries an effect's business answer.
func (s *Steps) Advance(ctx context.Context, point string, data map[string]string, effects ...Effect) error {
	if point == "" {
		return fmt.Errorf("idempotency: advance: an empty recovery point")
	}
	now := s.now()
	merged := maps.Clone(s.rec.Data)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, data)
	p := Progress{From: s.rec.Point, Point: point, Data: merged, Added: maps.Clone(data), LeaseToken: s.rec.LeaseToken, ExpiresAt: s.renew(now), UpdatedAt: now, Status: s.rec.Status, External: s.rec.External}
	if err := s.timed(func() error { return s.store.Advance(ctx, s.key, s.rec.LeaseToken, p, effects) }); err != nil {
		var conflict *ConflictError
		if errors.As(err, &conflict) {
			s.lost = conflict
		}
		return fmt.Errorf("idempotency: advance to %s: %w", point, err)
	}
	s.rec.Point, s.rec.Data, s.rec.ExpiresAt, s.rec.UpdatedAt = p.Point, p.Data, p.ExpiresAt, p.UpdatedAt
	s.hook(ctx, PointAfter(point))
	return nil
}

// PointAfter is the fault point reached once the recovery point point is
// committed: "after-" and point with underscores as dashes
// ("after-charge-created").
func PointAfter(point string) string { return "after-" + strings.ReplaceAll(point, "_", "-") }

func cloneRecord(rec Record) Record {
	rec.Request = append([]byte(nil), rec.Request...)
	if len(rec.Request) == 0 {
		rec.Request = nil
	}
	rec.Data = maps.Clone(rec.Data)
	return rec
}
