// Package audit is the auditor function: run every hour by an EventBridge
// schedule, each run Scans one parallel-scan segment of the idempotency
// table (Segment: the event's hour since the epoch, modulo Segments, 23), so
// that every record is looked at every 23 hours, twice within
// AbandonedRecordsAlarm's 48 hourly periods (see Segments), and a run
// reads 1/Segments of the table, and counts the records recovery has left
// behind (abandoned.Record.Stuck): UNKNOWN records and External reservations
// whose recovery check was lost, and items still carrying the TTL attribute
// from before the upgrade that took it away from them. Nothing else ends
// such a record, and the dead-letter queue that held its lost check forgets
// it after 14 days: the count, the EMF metric abandoned_records (emitted
// even when 0), keeps an alarm up for as long as one exists. Each stuck
// record, up to MaxLogged a run, is logged at Warn by its ID
// (tenant#key-hash), never a raw key or body (an item the filter reads
// that does not decode is counted too, kind unreadable, by its ID); past MaxLogged one Warn line
// says how many more the run found (oncectl unknown -limit N lists them
// all, N above their count: its default -limit is 100), and
// abandoned_records still counts them all.
//
// A run reads every page of its segment, up to MaxPages and while more than
// Margin is left before its deadline; stopped before the segment's end it
// emits audit_incomplete 1 (0 otherwise). A failed Scan fails the
// invocation, which Lambda retries (asynchronous invocation) and the
// function's Errors alarm sees; one that fails after a page was read first
// emits what the run counted (a lower bound) and audit_incomplete 1, so a
// sighting is not lost if the retries fail too (AuditIncompleteAlarm then
// fires even if a retry completes).
package audit
