package memory

import (
	"fmt"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/bounds"
)

// recordOverhead estimates what every record item of the DynamoDB store
// carries besides its variable fields: its attribute names, its status,
// times and flags.
const recordOverhead = 300

// checkWrite refuses, as the DynamoDB store does, a write of rec (nil: a
// write without a record item of its own to size, a Release or an Advance)
// and n effects that it could not make in one transaction: its answer over
// MaxStoredBody once compressed, or more than 100 items, counting the
// record's, its answer's chunks and the effects. The errors are the DynamoDB
// store's (bounds.ErrTooLarge, matching idempotency.ErrResponseTooLarge).
func checkWrite(op string, rec *idempotency.Record, n int) error {
	items := 1
	if rec != nil && rec.Response != nil {
		stored, _ := bounds.EncodeBody(rec.Response.Body)
		chunks, err := bounds.Chunks(len(stored), recordSize(*rec))
		if err != nil {
			return fmt.Errorf("memory: %s: %w", op, err)
		}
		items += chunks
	}
	if err := bounds.CheckItems(items + n); err != nil {
		return fmt.Errorf("memory: %s: %w", op, err)
	}
	return nil
}

// recordSize estimates the size of rec's item without its answer's body, as
// DynamoDB counts it (attribute names and values): what decides whether the
// DynamoDB store keeps the body inline or in chunks beside it.
func recordSize(rec idempotency.Record) int {
	n := recordOverhead + len(rec.Key.ID()) + len(rec.Route) + len(rec.Fingerprint) + len(rec.LeaseToken) +
		len(rec.Point) + len(rec.Request) + bounds.DataSize(rec.Data)
	if r := rec.Response; r != nil {
		for k, v := range r.Header {
			n += len(k) + len(v)
		}
		for _, c := range r.SetCookie {
			n += len(c)
		}
	}
	return n
}
