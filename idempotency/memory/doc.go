// Package memory is an in-memory idempotency.Store with the same semantics as
// the DynamoDB store, for fast tests of the engine and of handlers.
//
// Like the DynamoDB store it keeps times to the millisecond and compares the
// caller's now truncated the same way, leaves out empty headers and request
// bodies, and keeps a response's body non-nil; a record read back equals the
// one the DynamoDB store would return. Records and effects are held under one
// mutex, so every method is atomic, and records are copied in and out. Effects
// are kept per table and key for tests to inspect (Items).
//
// It refuses what the DynamoDB store refuses for its size, with the same
// errors (errors.Is matches the DynamoDB store's sentinels, and the
// idempotency ones they wrap), writing nothing, so that a handler tested on
// it answers as in production: more than 100 items in one write (the
// record's, its answer's chunks and the effects: dynamo's ErrTooLarge,
// idempotency.ErrResponseTooLarge), an answer over dynamo.MaxStoredBody
// once compressed (the same), a reservation's request over
// dynamo.MaxRequest (ErrRequestTooLarge, idempotency.ErrBodyTooLarge), and
// recovery point data over dynamo.MaxData (ErrDataTooLarge). What it cannot
// know it does not check: the size of its effects, which are functions (so
// neither DynamoDB's 4 MB a transaction with them nor an item an effect
// grows past 400 KB, dynamo's ErrItemTooLarge), and an answer's chunks are
// counted on an estimate of the record item's size, which can differ from
// DynamoDB's count by a few hundred bytes at the edge between a body kept
// inline and one in chunks.
package memory
