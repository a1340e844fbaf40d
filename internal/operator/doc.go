// Package operator is the operator's command-line tool, oncectl
// (cmd/oncectl): the stuck keys that the threat model hands to
// reconciliation for operator review.
//
//   - unknown lists the records left UNKNOWN (a Scan of the idempotency
//     table, filtered and bounded), by their ID: tenant#key-hash, oldest
//     first by created_at (a redrive, the checker's once per retention or a
//     client's, resets updated_at, not it), and marks lost the check of a
//     record past its expiry by more than recovery.MaxDelay and a margin
//     (its check chain was lost to a dead-letter queue: reannounce re-arms
//     it). It lists too, IN_PROGRESS, the External reservations past their
//     lease by as much (their check never handed them to the reconciler,
//     and no TTL deletes them: nothing else will) and those whose lease
//     ran out whose item still carries the TTL attribute (written before
//     External reservations lost it: DynamoDB's TTL may delete them a day
//     past their lease). The raw key is never stored, so never shown. An
//     item the filter reads that does not decode as a record is skipped,
//     named on stderr with the aws dynamodb get-item that shows it (the
//     auditor's kind unreadable); reannounce -lost skips it too and counts
//     it. COUNTED (counted with -json) says whether the auditor counts a
//     record (abandoned.Record.Stuck) now: a lost reservation written
//     less than an hour and 15 minutes ago, or a legacy one just past its
//     lease, says no and is counted later unless re-armed.
//     AbandonedRecordsAlarm clears once, without -tenant and with a -limit
//     above what it reads, no row says yes, none CHECK lost, none is
//     IN_PROGRESS (what reannounce -lost re-arms) and no unreadable item
//     is skipped. The counts on stderr
//     are of every record read, before -limit cuts the listing; with -json
//     too (stdout holds only the JSON lines), with the line saying it cut.
//   - show prints one record as JSON: its state, lease, expiry and the key
//     forwarded to the provider, and with -bodies the canonical request and
//     the stored response. A record is named by its ID, or by -tenant and
//     the raw -key, which is hashed and never printed.
//   - reannounce hands a record to the reconciler again: a fenced
//     MarkUnknown under a new lease token, which is the stream MODIFY the
//     reconciler is triggered by. It takes an UNKNOWN record or an External
//     reservation whose lease has run out (its check may be a dead letter),
//     and moves its expiry to at least the retention (ONCE_RETENTION) from
//     now: extended, never shortened, as the checker sets a reservation's
//     whose lease ran out (a client's automatic redrive extends it the same
//     way). The record carries no TTL attribute afterwards (one written
//     before UNKNOWN records lost it loses it): an UNKNOWN record is never
//     free for a new request, expired or not, and TTL never deletes it.
//     With -lost it reads the records unknown lists and does so for each
//     that no check will redrive or hand to the reconciler: its check
//     lost, or its item still carrying the TTL attribute (written before
//     the upgrade: an UNKNOWN record, or an External reservation whose
//     lease ran out). Each write is fenced on the lease token read: a
//     record changed meanwhile is reported and skipped, and the command
//     exits 1 (as when a write fails); unreadable items skipped alone do
//     not fail it. At most -limit records are tried: those past it are
//     counted as left, and the command exits 1 (raise -limit and run it
//     again). Its summary ends with a line rearmed=N changed=N
//     unreadable=N failed=N left=N.
//   - forget deletes an UNKNOWN record that can never be reconciled, the
//     operator's way out of its reconcile_failed alarm, once what its
//     request did at the other system is settled: a retry of its key then
//     runs the request again. What the reservation held is not given back:
//     a refund's hold stays on its payment, with no record of its key, and
//     the refund's retries answer 500 until an operator settles it with
//     settle-hold -no-record (for a refund's record, forget's output says
//     so, as settle_hold). It reads the record and prints it as JSON
//     (ID, tenant, route, status, lease token, expiry), and deletes it only
//     with -confirm naming the lease token shown, with a DeleteItem
//     conditioned on the status and lease token read: a record that changed
//     meanwhile is left as it is, and the command fails saying so. It
//     refuses any record but an UNKNOWN one: a COMPLETED one, a reservation
//     within its lease or of a route that is not External, and an External
//     reservation whose lease ran out, which is re-announced first (deleted
//     after its lease, its stream REMOVE looks like TTL's, and the sweeper
//     would restore it). The deletion is logged as one JSON line on
//     stderr. Its REMOVE carries no TTL identity, so the sweeper, which
//     restores only the UNKNOWN records that TTL deleted, leaves it deleted.
//   - dlq list lists the dead letters of the check queue and of the worker's
//     retry queue, leaving them where they are; dlq redrive sends some, or
//     all, back to the queue they came from, where their function handles
//     them again, idempotently.
//   - pending lists the payments still pending some time after their
//     creation (a Scan of the payments table, filtered and bounded), by
//     their ID: tenant#pay_id, never their source, customer, description
//     or metadata. A payment stays pending when the worker's stream record
//     failed without reaching the retry queue (the queue unreachable, a
//     settle error that is not transient): the record's on-failure queue
//     holds stream coordinates only.
//   - requeue-payment sends pending payments to the worker's retry queue, in
//     the worker's own message (worker.RetryBody), saying that an attempt
//     may have charged: the retrier charges again under the payment's
//     provider key (worker.ChargeKey), which the provider replays, or after
//     the retry window looks the charge up, so a payment requeued any
//     number of times is charged at most once. It refuses a payment that is
//     not pending.
//   - holds prints a payment's refund figures and holds as JSON: each
//     hold's key hash, record ID (tenant#key-hash), the refund ID its key
//     names and its amount, with the status and expiry of its key's record.
//     It reads the payment and its holds' records as one snapshot (a
//     TransactGetItems: a hold changes with its key's record, in one
//     transaction), again with the key of a hold reserved meanwhile, 3
//     times at most, then fails; a payment with more than 99 holds is read
//     record by record, then read again, and shown only if it did not
//     change.
//     A hold whose key's record is one a new request may reclaim
//     (idempotency.Record.Reclaimable) is stale: nothing will complete or
//     release it, and every retry of its key answers 500. It gets so when
//     its record was completed with the response_too_large problem without
//     the effects that give it back (reserve_effects_dropped,
//     reconcile_effects_dropped) and has since expired. A hold whose key has
//     no record is shown no_record, not stale: the record was forgotten, or
//     TTL deleted it (an External reservation or an UNKNOWN item written
//     before they lost their TTL attribute, which the store no longer gives
//     them, the reservation a day past its lease, or that expired COMPLETED
//     one)
//     and the sweeper may not have processed the deletion yet: it restores
//     the first two as UNKNOWN,
//     owning the hold, after the stream's lag, or, while its restore fails,
//     until the mapping gives the REMOVE up to SweeperDLQ an hour after it.
//   - holds -stale lists the holds of every payment (a Scan of the payments
//     table, filtered to the payments with holds and projected to what it
//     shows, bounded as the other listings; -tenant keeps one tenant's),
//     each with its key's record read as holds reads it (one that cannot
//     be decoded is a line, not stale, next inspect, listed with -all and
//     counted on stderr), the stale ones only unless -all, and what to
//     run next. Its stale is wider than the
//     one-payment view's: nothing will settle the hold without an operator
//     (its key has no record: settle-hold -no-record on noRecordNote's
//     terms; a record a new request may reclaim: settle-hold; a COMPLETED
//     record within its retention: wait for its expiry, then settle-hold),
//     or nothing has for -older-than (an UNKNOWN record, or an External
//     reservation past its lease, that old since its created_at, which a
//     client's redrive and the sweeper's restore keep: reannounce). A
//     reservation within its lease, or a record younger than -older-than,
//     is not stale: its request or the reconciler settles the hold. Each
//     hold it lists or counts is re-read after its record, and left out
//     when settled since the Scan.
//   - settle-hold settles a stale hold as the operator found the provider
//     (the refunds of the payment's charge): release (nothing was refunded:
//     the amount goes back into refundable; a retry of the key refunds
//     again) or refunded (the amount goes into amount_refunded, and the
//     refund item the key names is written, with -provider-refund, the
//     payment's currency, created now, no reason or metadata: a retry of the
//     key answers 422 idempotency_key_reused instead of refunding again, and
//     GET shows the refund). A hold whose key has no record it settles only
//     with -no-record, the operator's word that the record was forgotten
//     (forget) or that the sweeper has handled its deletion (more than an
//     hour after it, the mapping's MaximumRecordAgeInSeconds, and
//     SweeperDLQ holding no message for it): settled before a restore, the restored
//     record would find its hold gone, unresolvable for good (refunded), or
//     the amount the provider refunded would be refundable again (release).
//     It prints the hold, and writes only with
//     -confirm naming the amount shown, in one TransactWriteItems: the
//     payment's Update conditioned on the hold still being that amount, a
//     ConditionCheck that no record holds the key (dynamo.ReclaimCheck, the
//     store's own reservation condition), and for refunded the refund's Put, conditioned
//     on there being none. When the hold changed, the key got a live record
//     (a sweeper's restore), the refund exists, or another write was in
//     flight, nothing is written, and the command says why on stderr and
//     prints the hold read again (changed_meanwhile; reread_failed, the
//     hold as read before, when it cannot be). A write that failed
//     otherwise may have been made: it prints settled_unknown, no settled.
//     The settlement is logged as one JSON line on stderr.
//   - settle-order completes an order request (POST /v1/orders) left
//     UNKNOWN at order_created, typically one the key-retention guard
//     refused to charge again (orders.ErrKeyRetention, 500
//     order_needs_review), with what the operator found at the provider
//     under the phase's forwarded key, which its dry run prints: -charged
//     CHARGE (paid, 201, receipt queued), -declined CHARGE -failure-code
//     CODE (failed, 402), or -not-charged (charged now through the provider
//     the api uses, config.EnvProviderURL and the rest, under that key).
//     It runs the request's own phases, orders.Flow through the orders
//     Resolver, with a Charger that answers the operator's charge of the
//     recorded amount and currency (or is the provider), the key-retention
//     guard off, and completes the record with
//     recovery.Reconciler.Reconcile: the order's writes with the answer in
//     one transaction fenced on the lease. Without -confirm naming the
//     lease token shown it writes nothing. It settles only an order older
//     than the provider remembers its forwarded key, measured as the guard
//     measures it (orders.RecordKeyRemembered, ONCE_PROVIDER_KEY_RETENTION;
//     0, for ever: none): a younger one the reconciler settles itself. With
//     ONCE_PROVIDER_URL set it looks the key up at the provider first (in
//     the dry run, and again after its claim), and refuses an outcome the
//     charge found contradicts, -not-charged with any charge, and a lookup
//     that failed; without it, -charged and -declined stand on the
//     operator's word. With -confirm, it first claims the record (a fenced
//     MarkUnknown from the token shown to a new one, as reannounce's): of
//     settles given one token, one claims it and the others stop before
//     calling anything. A settle given a token an earlier settle claimed
//     with may claim it again while that one runs: a record it finds at
//     charge_created it finishes with the charge recorded, calling
//     nothing (exit 1, naming it, if that is not its outcome), and the
//     earlier one, its lease gone, reports the record as it is then. Each
//     claim reaches the reconciler as a stream MODIFY, refused again
//     (reconcile_unroutable: ReconcileUnroutableAlarm pages, and clears
//     after 5 minutes). It refuses a record that is not UNKNOWN, of
//     another route, or past order_created, and an order that holds
//     another answer than the one given. It prints the record, the order,
//     what the provider holds, the plan and the outcome
//     (-json: one object, refusals too), and logs the settlement as one
//     JSON line on stderr.
//
// It is configured like the functions, by config.FromEnv: DYNAMODB_ENDPOINT
// and SQS_ENDPOINT (unset: AWS), AWS_REGION, the table and queue variables.
// Against AWS it needs dynamodb:Scan, GetItem, BatchGetItem, UpdateItem,
// (for forget) DeleteItem and (for settle-hold) ConditionCheckItem on the
// idempotency table, dynamodb:Scan, GetItem and (for settle-hold) UpdateItem
// on the payments table, dynamodb:PutItem on the refunds table (settle-hold
// refunded; a TransactWriteItems is authorized item by item, as these
// actions), and sqs:GetQueueUrl, ReceiveMessage, ChangeMessageVisibility,
// DeleteMessage on the dead-letter queues and SendMessage on their source queues (the
// worker's retry queue among them). settle-order needs, in addition,
// dynamodb:PutItem on the idempotency table, GetItem and UpdateItem on the
// orders table and UpdateItem on the outbox table (its phases and its
// completion are TransactWriteItems of them, authorized item by item),
// and, with ONCE_PROVIDER_AUTH=aws_iam, the right to invoke the provider's
// function URL (its lookup, and -not-charged's charge).
package operator
