// Package bounds holds what the stores of once's public packages bound a
// write by: DynamoDB's limits on one write and the DynamoDB store's bounds
// derived from them, with the checks that need nothing of AWS, so that the
// in-memory store refuses what the DynamoDB store refuses, with the same
// errors. The DynamoDB store exports them under its own names (dynamo.
// MaxRequest, dynamo.ErrTooLarge, ...); see its documentation for why each
// bound is what it is.
package bounds

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"sync"

	"github.com/oncehq/once/idempotency"
)

// DynamoDB's limits on one TransactWriteItems, and the store's bounds.
const (
	// TransactItems: "TransactWriteItems is a synchronous write operation
	// that groups up to 100 action requests."
	TransactItems = 100
	// TransactSize: "The aggregate size of the items in the transaction
	// cannot exceed 4 MB."
	TransactSize = 4 << 20
	// MaxRequest bounds the canonical request an External record keeps.
	MaxRequest = 300_000
	// MaxData bounds a multi-step request's recorded data (keys and values).
	MaxData = 64 << 10
	// CompressAbove is the body size from which bodies are stored
	// compressed, when that makes them smaller.
	CompressAbove = 4 << 10
	// ChunkSize is the largest chunk of a body stored beside its record.
	ChunkSize = 350_000
	// MaxStoredBody bounds a stored (compressed) body: ten chunks.
	MaxStoredBody = 10 * ChunkSize
	// MaxItem is the largest record item written with its body inline,
	// below DynamoDB's 400 KB with room to spare.
	MaxItem = 390_000
)

var (
	// ErrTooLarge: a write whose answer, or whose items with the effects,
	// are more than one write carries. It matches
	// idempotency.ErrResponseTooLarge.
	ErrTooLarge = fmt.Errorf("dynamo: the response is too large to store: %w", idempotency.ErrResponseTooLarge)
	// ErrRequestTooLarge: a reservation whose request is larger than
	// MaxRequest. It matches idempotency.ErrBodyTooLarge.
	ErrRequestTooLarge = fmt.Errorf("dynamo: the request is too large to keep in its record: %w", idempotency.ErrBodyTooLarge)
	// ErrDataTooLarge: recovery point data over MaxData.
	ErrDataTooLarge = errors.New("dynamo: the recovery point's data is too large to keep in its record")
)

// gzipWriters reuses compressors: each holds most of a megabyte.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

// EncodeBody is body as stored: compressed when that pays, and its
// encoding ("" or "gzip").
func EncodeBody(body []byte) ([]byte, string) {
	if len(body) < CompressAbove {
		return body, ""
	}
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	_, _ = zw.Write(body) // a bytes.Buffer never fails
	_ = zw.Close()
	if buf.Len() >= len(body) {
		return body, ""
	}
	return buf.Bytes(), "gzip"
}

// Chunks is how many chunk items a record needs beside it for a stored
// (encoded) body of stored bytes, the record's item being rest bytes
// without it: none when both fit in MaxItem. A stored body over
// MaxStoredBody, or a record over MaxItem without its body, is ErrTooLarge.
func Chunks(stored, rest int) (int, error) {
	if stored+rest <= MaxItem {
		return 0, nil
	}
	if stored > MaxStoredBody {
		return 0, fmt.Errorf("%w: %d bytes once compressed, over %d", ErrTooLarge, stored, MaxStoredBody)
	}
	if rest > MaxItem {
		return 0, fmt.Errorf("%w: the record is %d bytes without its body, over %d", ErrTooLarge, rest, MaxItem)
	}
	return (stored + ChunkSize - 1) / ChunkSize, nil
}

// CheckItems refuses a write of n items (the record's, its chunks and the
// effects) over TransactItems, with ErrTooLarge.
func CheckItems(n int) error {
	if n > TransactItems {
		return fmt.Errorf("%w: the write is %d items with the effects, over %d", ErrTooLarge, n, TransactItems)
	}
	return nil
}

// CheckSize refuses a write of size bytes over TransactSize, with
// ErrTooLarge.
func CheckSize(size int) error {
	if size > TransactSize {
		return fmt.Errorf("%w: the write is %d bytes with the effects, over %d", ErrTooLarge, size, TransactSize)
	}
	return nil
}

// CheckRecord refuses a reservation whose request or data the store does
// not keep: ErrRequestTooLarge, ErrDataTooLarge.
func CheckRecord(rec idempotency.Record) error {
	if len(rec.Request) > MaxRequest {
		return fmt.Errorf("%w: %d bytes, over %d", ErrRequestTooLarge, len(rec.Request), MaxRequest)
	}
	return CheckData(rec.Data)
}

// CheckData refuses data over MaxData with ErrDataTooLarge.
func CheckData(data map[string]string) error {
	if n := DataSize(data); n > MaxData {
		return fmt.Errorf("%w: %d bytes, over %d", ErrDataTooLarge, n, MaxData)
	}
	return nil
}

// CheckProgress refuses a step that adds more data than MaxData, or that
// takes data within MaxData past it; what the record carries forward
// beyond the bound is not the step's.
func CheckProgress(p idempotency.Progress) error {
	if err := CheckData(p.Added); err != nil {
		return err
	}
	total, carried := 0, 0
	for k, v := range p.Data {
		total += len(k) + len(v)
		if _, added := p.Added[k]; !added {
			carried += len(k) + len(v)
		}
	}
	if total > MaxData && carried <= MaxData {
		return fmt.Errorf("%w: %d bytes with the step's, over %d", ErrDataTooLarge, total, MaxData)
	}
	return nil
}

// DataSize is the size of data: its keys' and values' lengths.
func DataSize(data map[string]string) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}
