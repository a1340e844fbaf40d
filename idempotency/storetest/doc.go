// Package storetest is the conformance suite for idempotency.Store
// implementations: every store runs Run, so the in-memory store the engine's
// unit tests use behaves as the DynamoDB store does.
//
// The suite covers the reclaim condition against every kind of existing
// record, fencing by lease token, the atomicity of effects, byte-exact
// responses, millisecond times, a store recognising its own write, races
// of many writers on one key, counting the effects that land, and UNKNOWN
// records and External reservations that outlive any expiry: a store whose
// TTL deletes records (Inspect.ExpireTTL) never deletes an UNKNOWN record
// or an External reservation.
package storetest
