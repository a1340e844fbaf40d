// Package modelcheck checks once's contract against random concurrent
// histories. It is a test package: everything but this comment lives in its
// _test.go files, and nothing imports it.
//
// # What a run does
//
// A run starts the whole local stack in process (devstack.Start: the API
// Gateway emulator, the authorizer and api functions, the provider
// simulator, which is the mail API too, the worker, sweeper, reconciler and
// receipts functions run from the tables' streams, the checker, retrier and
// resender from their queues) on DynamoDB Local, with crash injection on and
// a short lease and provider timeout. The stack reaches DynamoDB through a
// fault-injecting reverse proxy (proxy_test.go) that, on a seeded schedule
// of outage windows plus a thin background rate, fails data-plane calls on
// the idempotency, payments, refunds, orders and outbox tables before
// forwarding them (throttling, 500), forwards them and drops the answer (an
// ambiguous write: it landed, the caller sees an error), or holds them for
// up to a little more than a lease (a zombie: its lease runs out while it is
// still running). It also delivers some writes fenced on a lease token
// late (completions, and a fifth as many releases, recovery points and
// UNKNOWN writes), at the worst moment for a write that is not fenced: once
// a request of another body has taken their key, or else after 5.6-12s,
// whether or not their caller still waits (a write already sent can land
// after its client gave up), while their retries wait until they have
// landed (a partition that heals). Stream calls and the other tables (the
// API keys, the provider simulator's own) pass untouched.
//
// Five profiles of workload share all this. Mixed plans every endpoint,
// source and fault point. Refunds plans every key as a refund of the
// tenant's one payment, so that every key races the others for what is left
// of it. Settling does too, but the payment is still pending when the
// history starts (a source the provider charges at once, or slowly: the
// worker's call times out and the retrier settles it a second or more
// later), the tenant's keys start one after the other and stay in use to the
// end, and a second worker of the run's own, writing through the proxy, gets
// every payment's INSERT stream record again from a poller of its own,
// 0.5-6s later (an at-least-once delivery racing the first and the refunds
// holding on the payment it settled): a refund that finds its payment
// pending gets 400 payment_not_refundable, stored, which is legal only for a
// request sent before the payment was first settled. The proxy bounds when
// that was: the first settlement that succeeded landed between the moment
// the proxy sent it on to DynamoDB and the moment DynamoDB answered it,
// whatever its caller was then told (a settlement the proxy has begun to
// send goes through if its caller gives up, and one whose answer it drops
// counts), so the answer is a violation for a request sent once that answer
// came, and allowed for one sent while it was in flight, which may have read
// the payment first. Orders plans every key as an order (a second body, if
// any, refused 422) sent once, in most cases with a crash after a recovery
// point or after the provider call, otherwise dying of its source (slow,
// down for a while, never answering in time), then, about when its lease
// runs out, retried by two or three clients at once, each on a lane of its
// own, that race to take the abandoned request over and resume it, with half
// the completions and a tenth of the recovery points late. The proxy notes
// the takeovers (an Advance that keeps the recovery point under a new,
// running lease token, fenced on the abandoned one) and the run logs how
// many keys saw one won with two requests or more in flight and saw two
// requests or more race to take one lease over; two takeovers that win the
// same abandoned lease (two new tokens written over it: two owners at once)
// fail any run, of any profile, crafted schedules included.
// Handover plans every key as charges whose first
// body the provider refuses (nothing happens, so recovery releases the key)
// and whose second it charges, and delivers half the completions late:
// the interleaving lease fencing exists for, a key handed on while a
// request that held it may still write, which mixed histories reach rarely
// (once's recovery completes a key whenever anything happened, so a key
// changes hands only after a request that provably did nothing).
//
// Several clients then send requests over real HTTP, as users do (Bearer API
// keys of several tenants, Idempotency-Key, JSON bodies with their keys in a
// random order): a few keys per tenant, the same key value in every tenant,
// one to three request variants per key (another body, or another endpoint),
// every idempotent endpoint of the endpoint table (endpoints_test.go:
// payments, charges, refunds and orders), the provider simulator's source
// tokens (charged, declined, unavailable, timeout, slow, unknown to it, and
// for orders down for 3s then charged; a refund does as the source of the
// payment it refunds says), Once-Fault
// crashes at every fault point (an order's after each recovery point too),
// and client retries after 409 and 5xx. A crash happens only where a
// request executes, so before it sends, a client reads the key's record
// from DynamoDB Local (not through the proxy) and sends a Once-Fault header
// on 50% of its requests under a key that is free or abandoned (no record,
// or a reservation whose lease has run out) and that no client has seen a
// replay or an effectful answer of (80% in refunds and settling, whose
// refunds are mostly refused by their hold, which no fault point follows),
// and on 2% of the others (replays, 409s and refusals, which reach no fault
// point); the run logs crashed/sent per endpoint and fault point, and the
// bounded run (and make check's) fails when none of its runs crashed at
// all (crashes that stopped being injected check nothing; counted over the
// runs, not per run or pair: a bounded profile crashes 1-10 times, at 2-7
// of its pairs, and a short refunds run can see none by chance). Before, 15% of all requests carried
// one, and seeds 4242 and 777 crashed mixed 2 and 1 times, handover 0 and
// 3, refunds 2 and 1, settling 0 and 0 (the faults went mostly to replays,
// 409s and refusals: 1-3 crashes of 23-58 faulted requests); now mixed 10
// and 5, handover 5 and 6, refunds 1 and 3, settling 4 and 4 (of 14-37). Before the history, the run charges
// one payment per tenant (with a source drawn for it) through the API and
// waits for the worker to settle it: the tenant's refunds share it, and it
// is too small for all of them, so that refunds of different keys race
// for what is left and some are refused (400 amount_exceeds_refundable,
// which the hold must answer before the provider would refuse). Each
// request's call and return are recorded on one monotonic clock; a request
// counts as running until a late write of its variant sent while it ran
// has landed (the proxy knows the variant of the record a write puts), and
// one whose client saw no answer at all until the end. Every body
// carries its tenant, key and variant in its metadata, which the payments,
// orders and refunds and the provider keep, so that effects are counted per
// variant without knowing how once derives its identifiers.
//
// Once the clients are done and the proxy has stopped injecting faults, the
// run waits (90s at most; 15s when an answer has broken the contract
// already, as the run fails anyway) until the system is quiet: no idempotency record
// IN_PROGRESS or UNKNOWN, no payment pending and no receipt job unsent,
// which takes the checker (a recovery check a second after each lease), the
// reconciler, the worker and the receipts function for reservations,
// payments and receipts nobody retried. The tables have no TTL, as on AWS
// where it takes days (MODELCHECK_TTL=on turns DynamoDB Local's on: its
// deletions within seconds then race the checker for the reservations that
// are not External; an External reservation and an UNKNOWN record carry no
// TTL attribute, so TTL never deletes them). It then reads the final
// record of every key and every effect (payment items, provider charges,
// provider refunds, order items), and sends every variant of every
// completed key once more (probes). The history, the final reads and the
// probes are checked per (tenant, key) with porcupine against the model
// below, and against invariants stated directly (effects at most one per
// key, only the stored request's, answers of the endpoint's statuses and
// problem codes carrying their own request's tags, nothing stuck), and each
// endpoint's systems against each other (audits: a refund item for each
// provider refund, every payment's amount_refunded the sum of its charge's
// refunds, never more than its amount, and nothing left held; for each
// order one provider charge when the provider charged it, and for a paid
// one exactly one receipt job, sent, and one message).
// Every failure prints the seed and writes porcupine's visualization of the
// failing key (with the proxy's faults on that key as annotations) and the
// stack's log under .cache/modelcheck/ (MODELCHECK_OUT overrides).
//
// # The model
//
// The state of one key is its phase, the variant it belongs to, an answer and
// the set of variants whose effect exists:
//
//   - free: no record counts (none, or released);
//   - held(v, a): a request of variant v took a reservation (IN_PROGRESS,
//     later maybe UNKNOWN) and nothing is stored; a is the answer that
//     request sent unstored, if any;
//   - stored(v, a): v's answer a is stored (a is unknown until some client
//     or the final read sees it).
//
// A request of variant v is one operation, whose output is its answer's
// class: final (any 2xx or 4xx that is not 409 or 422
// idempotency_key_reused: 201, 402 card_declined, 422 provider_rejected),
// in progress (409), reused (422 idempotency_key_reused) or failed (5xx,
// crashes included). An endpoint that calls out (External mode: charges)
// holds a reservation while it runs, which other requests see; so each of
// its requests that may have reserved (a final answer that is no replay, a
// 5xx, or any request that ran for a lease or longer) is given a second
// operation over the same interval, "enter", which may take a free key
// (held(v), with or without v's effect) or do nothing. On a multi-step
// endpoint (orders), whose retry takes a reservation of its own request
// abandoned at a recovery point over and resumes it, "enter" may also take
// held(v) over from another request of the same variant v: the resumed
// request then answers as the first one (not as a replay), with the answer
// that one may have sent unstored. Effects happen only while the key is held
// by their own variant, or (Atomic: payments) with the stored answer in one
// transaction.
//
// Transitions, from the state after recovery (below):
//
//   - final a, not replayed: from free, or, on an External endpoint, from
//     held(v, a or unknown) taken by this very request, to stored(v, a), or
//     on an External endpoint also to held(v, a) (the answer was sent but
//     could not be stored; recovery stores the same bytes). An effectful
//     answer (201, 402) adds v's effect.
//   - final a, replayed: from stored(v, a or unknown) to stored(v, a). On an
//     Atomic endpoint also from free (the request's own transaction landed,
//     its answer was lost and the SDK's retry found it).
//   - 409: from held(v); from any state when the request is External and ran
//     for a lease or longer (a zombie is fenced with 409 whatever holds the
//     key now). No change.
//   - 422 reused: from held or stored of another variant. No change.
//   - 5xx: no change; or, from held(v) taken by this request, released
//     (without v's effect) or stored with an unseen answer (a crash after
//     the completion); or, from free, held(v) (External: an ambiguous
//     reservation) or stored with an unseen answer (an ambiguous or crashed
//     commit; Atomic: with its effect).
//
// Recovery (the checker, the reconciler, DynamoDB's TTL and the sweeper,
// and retries that hand an expired reservation over) happens between any
// two operations without a client: held(v) with v's effect becomes stored(v) (the reconciler
// found the charge and rebuilt the answer, byte for byte the one sent, if
// any), held(v) without it becomes free (the provider provably did nothing).
// Nothing else happens by itself: in particular, a key with an effect is never
// freed, and no other variant may act on it.
//
// The final read is one more operation per key, after everything else: it
// is legal only in a state without a reservation whose effects are exactly
// the ones counted and whose phase and answer are those of the stored record
// (its status, every header field and body), and never with a duplicate
// effect or a record still IN_PROGRESS or UNKNOWN.
//
// Answers are compared byte for byte (digest): status, body, and every
// header field but those that legitimately differ per response, which
// idempotency sends anew with each: Idempotent-Replayed (the replay mark),
// Date, the framing (Content-Length, hop-by-hop fields) and the request IDs
// (the router's Request-Id, API Gateway's X-Amzn-Requestid), which name
// the request rather than its answer. Set-Cookie lines count one by one, in
// order; Cache-Control, Retry-After or any other field a handler sets count
// as sent.
//
// What the model allows while a reservation of another body is held is
// exactly 422 (once's decideExisting compares fingerprints before states);
// 409 only for the holder's own body, or for a zombie. What it does not check:
// latency, Retry-After values, and the answer to a request that never
// reserved and got 5xx (those change nothing either way).
//
// # Running it
//
//   - `make test` runs one bounded history of each profile but orders
//     (TestModelCheck, a random seed, 8 clients, 3 tenants, 12s of
//     history: 250-600 requests on 5 keys per tenant for mixed and
//     refunds, 150-500 on 3 for handover; 8s for settling, about 300 on 4;
//     under -race on a loaded 2-core machine mixed takes 22-26s, handover
//     20-23s, refunds 19-24s, settling 21-29s, 87-97s in all, 86-96s
//     before the crashes went to the requests that execute);
//     a bounded orders run (8s of history, 60-80 requests on 3 keys per
//     tenant, about 30s in all) is MODELCHECK_PROFILE=orders;
//   - `make check CHECK_TIME=5m` runs fresh seeds until the time is up, the
//     profiles in turn (MODELCHECK_PROFILE=mixed, handover, refunds,
//     orders or settling keeps to one);
//   - MODELCHECK_SEED=n replays seed n (the same choices and fault schedule;
//     the interleaving is the machine's);
//   - TestPlantedUnfencedCompletion proves that the checker catches a
//     completion that is not fenced on its lease token (the proxy rewrites
//     the condition), on a crafted schedule, and passes the same schedule
//     unplanted; TestPlantedUnfencedTakeover does the same for a takeover
//     of an abandoned order not fenced on the abandoned lease (two retries
//     held at the proxy until both race), and TestPlantedRefundOverHold
//     for a refund hold that ignores what is left; MODELCHECK_PLANT=<name>
//     puts a plant (see plants and below) into the random runs, to measure
//     what they catch; a run the plant never acted in (nothing rewritten)
//     is skipped, saying so, as it neither caught nor missed it (and a
//     failure of such a run is said not to be the plant's);
//   - TestAbandonedChargeKeepsItsKey and TestLateProviderWriteAfterRelease
//     are the regression tests of two double charges the check found (an
//     abandoned External reservation deleted by TTL before it was
//     reconciled, which now carries no TTL attribute at all; a key released
//     before the provider had applied a call its client gave up on), on
//     crafted schedules;
//   - MODELCHECK_TTL=on runs with DynamoDB Local's TTL on;
//   - MODELCHECK_OUT sets where failures write their files.
//
// # What the plants of the newer profiles catch
//
// Measured on a loaded 2-core machine, one seed at a time, as seeds run and
// seeds failed:
//
//   - resettle (the worker's settlement not conditioned on the payment
//     still pending): settling 9 seeds, 7 caught (answers 422
//     provider_rejected once a second settlement reset what the refunds
//     held, refunds stuck UNKNOWN, histories not linearizable), and since
//     the payment_not_refundable rule takes the settlement's landing
//     rather than its answer to the settler 5 more seeds (1-5), 5 caught
//     by the same signals (the rule caught none: a resettlement never
//     makes a payment pending again); mixed 5 seeds, none caught. A
//     failing run whose answers gave it away takes 20-38s, one that only
//     leaves keys stuck 100-105s;
//   - owner-forward-key (an order's charge forwarded under a key that
//     changes with its lease token, so with every takeover): orders 7
//     seeds, 7 caught, mixed 5 seeds, 5 caught, by the orders audit (two
//     to eight provider charges for one paid order: a retry or the
//     reconciler that resumed the phase after a provider call that
//     crashed, timed out or was slow charged again). Its crafted,
//     deterministic regression test is internal/e2e's
//     TestOrdersTakeoverRaceChargesOnce (two retries racing to take over
//     an order that died after its charge was sent: with the lease token
//     in Steps.ForwardKey it finds 2 charges, or 5 when the provider call
//     timed out);
//   - unfenced-takeover (a takeover of an abandoned multi-step request not
//     fenced on the abandoned lease token): orders 8 seeds (500-507), 8
//     caught, each by the two-owner count only (two retries won one
//     abandoned lease on 2-7 of 9 keys), nothing else in them broken (see
//     below). Its crafted test is TestPlantedUnfencedTakeover.
//
// Unplanted, orders and settling passed every seed run (orders 12
// seeds, settling 19, seeds 101-105 under the rule as it is now: their
// 2-4 answers payment_not_refundable each were all to refunds sent before
// the first settlement was sent, none while it was in flight, which took
// 1-55ms, and in 4 of their 15 payments the settlement that landed had
// its answer dropped or its caller gone, which the rule before noted not
// at all). An unplanted orders run has a takeover on 3-8 of
// its 9 keys, two requests or more in flight at one on 3-8, and two
// retries or more racing to take one lease over on 2-7.
//
// Recovery points and takeovers written without their lease condition
// (every Advance fenced on its recovery point only) passed the history,
// the final reads and the audits before two owners were asserted against:
// in 9 orders and 4 mixed seeds, none caught it, although in 3 of those orders runs two
// retries won the same abandoned lease on 2-6 keys. Its effects cannot be
// seen: every Advance is also fenced on the point it goes on from, and
// writes its own lease token, so one owner per phase goes on and the
// completion (fenced on the token) is that owner's; the phases are
// idempotent upserts, the provider dedupes a phase's call by its
// forwarded key (the request's fingerprint and the phase), and the answer
// is rebuilt from what the phases recorded, so a second owner can only
// repeat, byte for byte, what the first did. The takeover is caught by
// the proxy instead: two takeovers that win one abandoned lease fail the
// run (unfenced-takeover; TestPlantedUnfencedTakeover passed that plant
// before this was asserted). A phase's recovery point written without its
// lease condition is still no plant, for the same reasons.
//
// # Adding an endpoint
//
// An endpoint is one entry in the endpoints table: its path, whether it holds
// a reservation while it calls out (External), its fault points, a body
// generator (the checker adds the tags to its metadata), the statuses of its
// final answers and which of them mean an effect, and a function that counts
// effects per tag at the systems the endpoint writes to (one per request
// whose effect exists: refunds count the provider's refunds, orders their
// order items, which exist from the first phase on). Optionally: a setup
// that readies the planned variants through the stack before the history
// (refunds: their payments), what the endpoint still does in the
// background (orders: receipts to send), which the run waits for, and an
// audit of its systems against each other once the system is quiet.
package modelcheck
