package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oncehq/once/idempotency"
)

// MaxDelay is the longest a Queue delays a message: SQS's DelaySeconds
// limit, 15 minutes. A check due later is sent with MaxDelay, and the
// Checker sends it on until it is due.
const MaxDelay = 15 * time.Minute

// DefaultMargin is how long after a lease deadline a check is due: enough
// for the clocks of the api and the checker to disagree a little. A check
// that still arrives early is sent on for the rest.
const DefaultMargin = time.Second

// Queue delivers messages later: in AWS an SQS queue, each message sent with
// its own DelaySeconds (one SendMessage call; package sqsqueue is one).
// Delivery is at least once, so every consumer is idempotent.
type Queue interface {
	// Send enqueues body, to be delivered no earlier than delay (from 0 to
	// MaxDelay) from now. An error means the message may not have been
	// sent.
	Send(ctx context.Context, body string, delay time.Duration) error
}

// Check is the message a Scheduler sends when a reservation is made, or a
// record is moved to UNKNOWN, and a Checker acts on once its deadline has
// come: recover the record with this ID if it is still the reservation held
// under this lease token, or redrive it if it is still UNKNOWN under it.
type Check struct {
	// Record is the record's storage ID, idempotency.Key.ID: the tenant and
	// the hash of the key, never the raw key.
	Record string `json:"record"`
	// Route is the record's route, for logs (and for dispatching on it,
	// should a route ever need its own recovery).
	Route string `json:"route"`
	// LeaseToken is the record's lease token: the reservation's, or the
	// token the record was moved to UNKNOWN under.
	LeaseToken string `json:"lease_token"`
	// Deadline is the record's ExpiresAt when the check was sent: when a
	// reservation's lease runs out, or an UNKNOWN record's expiry. The
	// Checker goes by the stored record, not by it.
	Deadline time.Time `json:"deadline"`
}

// NewCheck returns the check of rec: a reservation, due when its lease
// runs out, or an UNKNOWN record, due at its expiry.
func NewCheck(rec idempotency.Record) Check {
	return Check{Record: rec.Key.ID(), Route: rec.Route, LeaseToken: rec.LeaseToken, Deadline: rec.ExpiresAt}
}

// Encode returns c as a message body (JSON).
func (c Check) Encode() string {
	b, _ := json.Marshal(c) // strings and a time: always encodes
	return string(b)
}

// Key returns the scoped key of the checked record.
func (c Check) Key() (idempotency.Key, error) {
	return idempotency.ParseID(c.Record)
}

// DecodeCheck parses a message body written by Encode, checking that it
// names a record, a lease and a deadline.
func DecodeCheck(body string) (Check, error) {
	var c Check
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		return Check{}, fmt.Errorf("recovery: check message: %w", err)
	}
	var errs []error
	if _, err := c.Key(); err != nil {
		errs = append(errs, fmt.Errorf("record %q: %w", c.Record, err))
	}
	if c.LeaseToken == "" {
		errs = append(errs, errors.New("no lease token"))
	}
	if c.Deadline.IsZero() {
		errs = append(errs, errors.New("no deadline"))
	}
	if err := errors.Join(errs...); err != nil {
		return Check{}, fmt.Errorf("recovery: check message: %w", err)
	}
	return c, nil
}

// delayUntil is the delay that delivers a message at t (plus margin), as
// seen at now: never negative, at most MaxDelay (a later check is sent on).
func delayUntil(t time.Time, margin time.Duration, now time.Time) time.Duration {
	return min(max(t.Add(margin).Sub(now), 0), MaxDelay)
}
