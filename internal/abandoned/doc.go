// Package abandoned tells which idempotency records recovery has left
// behind: the records no recovery check will redrive or hand to the
// reconciler, and that nothing else ends, as neither an UNKNOWN record nor
// an External reservation (IN_PROGRESS, its request may have called the
// provider) carries a TTL attribute.
//
// It is the one classification `oncectl unknown` (and `oncectl reannounce
// -lost`) and the auditor function use: Filter is the Scan filter that reads
// the candidates (UNKNOWN records, and External reservations whose lease ran
// out), FromItem decodes a scanned item and says whether it is listed (an
// UNKNOWN record; a reservation whose check is lost, CheckLost, or whose item
// still carries the TTL attribute, a legacy item written before such records
// lost it), Record.Abandoned whether `reannounce -lost` re-arms it, and
// Record.Stuck whether the auditor counts it: the same, but a reservation
// (legacy or not) only once its check is lost and its last write is older
// than the sweeper stream's retries (StreamMaxRecordAge) and
// LostCheckMargin, as its check may still be on its way until then.
package abandoned
