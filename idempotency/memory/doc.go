// Package memory is an in-memory idempotency.Store with the same semantics as
// the DynamoDB store, for fast tests of the engine and of handlers.
//
// Like the DynamoDB store it keeps times to the millisecond and compares the
// caller's now truncated the same way, leaves out empty headers and request
// bodies, and keeps a response's body non-nil; a record read back equals the
// one the DynamoDB store would return. Records and effects are held under one
// mutex, so every method is atomic, and records are copied in and out. Effects
// are kept per table and key for tests to inspect (Items).
package memory
