// Package simulator is a payment provider for tests and demos: a small,
// Stripe-like HTTP API that is idempotent per key and keeps its state in
// DynamoDB (the ProviderTable), so it survives restarts and can be shared by
// several processes.
//
// # API
//
//	POST /v1/charges                         create a charge (Idempotency-Key required)
//	GET  /v1/charges?idempotency_key=K       the charge created with key K
//	GET  /v1/charges/{id}                    the charge with that id
//	GET  /v1/_test/charges?idempotency_key=K {"count": n}: charges created with key K
//	POST /v1/refunds                         refund a charge (Idempotency-Key required)
//	GET  /v1/refunds?idempotency_key=K       the refund created with key K
//	GET  /v1/refunds?charge=ID               {"object": "list", "data": [...], "has_more"}:
//	                                         the charge's refunds, oldest first (100 at most)
//	POST /v1/messages                        send an e-mail (not idempotent)
//	GET  /v1/messages?to=ADDRESS             {"object": "list", "data": [...]}: what was sent to ADDRESS
//
// A charge request is JSON: {"amount", "currency", "source", "customer",
// "description"?, "metadata"?}. The source token decides what happens, as
// Stripe's test tokens do:
//
//   - tok_visa: the charge succeeds (201, the charge object).
//   - tok_chargeDeclined: the charge is recorded as failed and the answer is
//     402 card_error/card_declined, naming the failed charge.
//   - tok_unavailable: 503 with Retry-After; nothing is charged or recorded.
//     503 (and 429) is documented as "not charged".
//   - tok_timeout: the charge succeeds and is recorded, then the answer is
//     held for HoldFor (or until the client goes away): the ambiguous case.
//   - tok_slow: the charge succeeds and is recorded, and the answer comes
//     after SlowDelay.
//
// tok_refundUnavailable, tok_refundTimeout and tok_refundSlow charge as
// tok_visa does; refunds of their charges then behave as the charges of
// tok_unavailable, tok_timeout and tok_slow do (Stripe, too, picks a
// refund's test behaviour by the card that was charged).
//
// Any other source is a 400 invalid_request, as is a request outside the
// limits, which count characters, not bytes, and are the API's: amount 1 to
// 99999999, customer 1 to 255 characters, description up to 1000, metadata
// up to 20 pairs, keys of 1 to 40 characters, values up to 500.
//
// A refund request is JSON: {"charge", "amount"?, "reason"?, "metadata"?}:
// the charge's id, the amount (all that is left of the charge when absent),
// duplicate, fraudulent or requested_by_customer, and metadata as for a
// charge. A charge that does not exist, has failed, or has less left than
// the amount is a 400 (resource_missing, charge_not_refundable,
// charge_already_refunded, amount_too_large), and nothing is recorded: the
// key stays free.
//
// # Idempotency
//
// The first request with a key records the charge, with its answer, in one
// conditional transaction (attribute_not_exists), before anything is sent:
// a simulator that dies after charging has recorded the charge. A later
// request with the same key and the same parameters gets the recorded answer
// at once (same status and body, Idempotent-Replayed: true; a replay is never
// held or delayed), and one with other parameters gets 422
// idempotency_key_reused. Concurrent requests with one key charge once: the
// conditional write decides. A 500 means the simulator could not tell whether
// its write happened (a DynamoDB error): the outcome is unknown, as it would
// be with a real provider.
//
// # Mail
//
// The simulator is also the mail API the receipts go through. A message is
// JSON: {"to", "subject", "text", "order"}. Like most mail APIs it is not
// idempotent: every POST answered 202 (with the message, its "id" msg_...)
// sends one message, however often the same one is posted. The address
// decides what happens: to any address at unavailable.example the answer is
// 503 with Retry-After and nothing is sent (an outage that does not end);
// to "<name>+fail<N>@..." the first N messages get that 503 and the later
// ones are sent (an outage that ends). GET /v1/messages?to= lists, for
// tests, every message sent to the address, in order. A 500 means the
// simulator could not tell whether the message was stored (sent).
//
// # Items
//
// A charge is one item whose pk is the idempotency key, holding the charge
// (id, status, amount, currency, source, customer, created, failure code), a
// hash of the request parameters, the recorded answer and charge_count, the
// number of charges created with the key (1; the simulator never charges a
// key twice, and counts declined charges too). A second item, pk
// "id#<charge id>", points from the charge id to the key; it is written in the
// same transaction. Keys starting with "id#" are therefore refused.
//
// A refund is one item whose pk is "re#" and its key (keys starting with
// "re#" are refused too), holding the refund, its parameters' hash and its
// answer. It is written in one transaction with an update of the charge's
// item that sets refunded, the charge's refunded total, from the value read
// (a concurrent refund of the charge makes the transaction fail, and the
// refund is tried again on the total as it is then, a bounded number of
// times), and adds the key to refund_keys, which GET /v1/refunds?charge=
// reads the refunds by.
//
// The messages sent to an address are one item, pk "mailbox <address>" (an
// idempotency key holds no space), with the list of messages and the count
// of messages posted to it.
package simulator
