package dynamo

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/bounds"
)

// Large answers. A DynamoDB item stops at 400 KB, and a stored answer must
// replay whatever its size. A response body of CompressAbove bytes or more is
// stored gzip-compressed (response_encoding gzip) when that makes it
// smaller, which brings typical JSON down five- to tenfold. A body that still
// does not fit in the record's item is stored in chunk items of up to
// ChunkSize bytes beside it, in the same transaction: items of the same
// table whose partition key is the record's, "#chunk#", a random id and the
// chunk's index, with the record's TTL, so that they retire with it. The
// record then carries response_chunks (their number), response_chunk_id and
// response_sha256 (of the stored, possibly compressed, body), and no
// response_body; reading it back costs one BatchGetItem more. A
// TransactWriteItems carries at most 4 MB, so the stored body is bounded by
// MaxStoredBody: a larger answer fails the write with ErrTooLarge, and the
// middleware answers 500 without storing anything. So does an answer whose
// chunks, with the effects, would pass DynamoDB's other limits on one write
// (limits.go).
const (
	// CompressAbove is the body size from which bodies are compressed:
	// 4 KiB (4,096 bytes).
	CompressAbove = bounds.CompressAbove
	// ChunkSize is the largest chunk of a body stored beside its record:
	// 350,000 bytes.
	ChunkSize = bounds.ChunkSize
	// MaxStoredBody bounds a stored (compressed) body: ten chunks,
	// 3,500,000 bytes.
	MaxStoredBody = bounds.MaxStoredBody
	// maxItem is the largest record item the store writes with its body
	// inline, below DynamoDB's 400 KB with room to spare.
	maxItem = bounds.MaxItem
	// maxInflated bounds a decompressed body, against a corrupt item.
	maxInflated = 64 << 20
)

// Attributes of large answers.
const (
	AttrResponseEncoding = "response_encoding" // S: "gzip", absent for a body stored as it is
	AttrResponseChunks   = "response_chunks"   // N: chunk items holding the body, absent when inline
	AttrResponseChunkID  = "response_chunk_id" // S: the chunks' id
	AttrResponseSHA256   = "response_sha256"   // S: hex SHA-256 of the stored body, with chunks
	AttrChunk            = "chunk"             // B: a chunk item's part of the body
)

// ErrTooLarge is returned (wrapped) by a write whose answer is larger than
// MaxStoredBody once compressed. It matches idempotency.ErrResponseTooLarge.
var ErrTooLarge = bounds.ErrTooLarge

// encodeBody is body as stored: compressed when that pays, and its encoding
// ("" or "gzip").
func encodeBody(body []byte) ([]byte, string) { return bounds.EncodeBody(body) }

// decodeBody inflates a stored body of encoding.
func decodeBody(stored []byte, encoding string) ([]byte, error) {
	switch encoding {
	case "":
		return stored, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(stored))
		if err != nil {
			return nil, fmt.Errorf("gunzip: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(zr, maxInflated+1))
		if err != nil {
			return nil, fmt.Errorf("gunzip: %w", err)
		}
		if len(body) > maxInflated {
			return nil, fmt.Errorf("gunzip: more than %d bytes", maxInflated)
		}
		return body, nil
	}
	return nil, fmt.Errorf("unknown response encoding %q", encoding)
}

// itemSize estimates the stored size of item as DynamoDB counts it, never
// below it: "the sum of the lengths of its attribute names and values"
// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html).
// A number counts one byte per character, more than DynamoDB's one byte per
// two significant digits.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value) + 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberSS:
		return setSize(v.Value, func(e string) int { return len(e) })
	case *types.AttributeValueMemberNS:
		return setSize(v.Value, func(e string) int { return len(e) + 1 })
	case *types.AttributeValueMemberBS:
		return setSize(v.Value, func(e []byte) int { return len(e) })
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	}
	return 8
}

// setSize counts a set as a list: 3 bytes, and each element's size and 1.
func setSize[E any](elems []E, size func(E) int) int {
	n := 3
	for _, e := range elems {
		n += size(e) + 1
	}
	return n
}

// recordItems is the record's item and, for a body too large to stay in it,
// the chunk items that hold the body. A record whose answer does not fit (a
// body over MaxStoredBody once compressed, or an item over maxItem without
// it) is an error. Its request and data are not checked against their
// bounds: a completion carries them from the reservation and the phases,
// checked when they were written (checkRecord, checkProgress), and a record
// holding more (written before the bounds) must still complete.
func recordItems(rec idempotency.Record) (map[string]types.AttributeValue, []map[string]types.AttributeValue, error) {
	item := ItemFromRecord(rec)
	if rec.Response == nil || itemSize(item) <= maxItem {
		return item, nil, nil
	}
	stored := item[AttrResponseBody].(*types.AttributeValueMemberB).Value
	if len(stored) > MaxStoredBody {
		return nil, nil, fmt.Errorf("%w: %d bytes once compressed, over %d", ErrTooLarge, len(stored), MaxStoredBody)
	}
	delete(item, AttrResponseBody)
	var id [8]byte
	_, _ = rand.Read(id[:])
	chunkID := hex.EncodeToString(id[:])
	sum := sha256.Sum256(stored)
	var chunks []map[string]types.AttributeValue
	for i := 0; len(stored) > 0; i++ {
		part := stored[:min(ChunkSize, len(stored))]
		stored = stored[len(part):]
		chunk := map[string]types.AttributeValue{
			AttrPK:          str(chunkKey(rec.Key, chunkID, i)),
			AttrChunk:       &types.AttributeValueMemberB{Value: part},
			AttrExpiresAtMS: item[AttrExpiresAtMS],
		}
		if ttl, ok := item[AttrExpiresAt]; ok { // a record without TTL (UNKNOWN) keeps its chunks as long
			chunk[AttrExpiresAt] = ttl
		}
		chunks = append(chunks, chunk)
	}
	item[AttrResponseChunks] = num(int64(len(chunks)))
	item[AttrResponseChunkID] = str(chunkID)
	item[AttrResponseSHA256] = str(hex.EncodeToString(sum[:]))
	if size := itemSize(item); size > maxItem {
		// What is left is the answer's headers and Set-Cookie lines (the
		// request and data are bounded when written: checkRecord,
		// checkProgress), or a record written before those bounds.
		return nil, nil, fmt.Errorf("%w: the record is %d bytes without its body, over %d", ErrTooLarge, size, maxItem)
	}
	return item, chunks, nil
}

func chunkKey(key idempotency.Key, chunkID string, i int) string {
	return key.ID() + "#chunk#" + chunkID + "#" + strconv.Itoa(i)
}

// chunkRef says where a record item's body is, when it is in chunks.
type chunkRef struct {
	id     string
	n      int
	sha256 string
}

// chunksOf returns where item's body is when it is in chunks: ok is
// false when it is not (no AttrResponseChunks). A reference that is there
// but damaged (a count that is not a positive number, a chunk ID or a
// checksum missing: a hand edit, a partial restore) is an error: read as
// no chunks, the record would replay an empty body.
func chunksOf(item map[string]types.AttributeValue) (ref chunkRef, ok bool, err error) {
	d := decoder{item: item}
	if _, ok := item[AttrResponseChunks]; !ok {
		return chunkRef{}, false, nil
	}
	ref = chunkRef{n: int(d.int(AttrResponseChunks, true)), id: d.str(AttrResponseChunkID, true), sha256: d.str(AttrResponseSHA256, true)}
	switch {
	case d.err != nil:
		return chunkRef{}, true, fmt.Errorf("dynamo: the body's chunk reference is damaged: %w", d.err)
	case ref.n <= 0 || ref.id == "" || ref.sha256 == "":
		return chunkRef{}, true, fmt.Errorf("dynamo: the body's chunk reference is damaged: %d chunks, chunk id %q, checksum %q", ref.n, ref.id, ref.sha256)
	}
	return ref, true, nil
}

// pastTTL reports whether item's TTL attribute is before now: DynamoDB's
// TTL process may have deleted it, and the chunks that carry its TTL. An
// item without one (an UNKNOWN record's) never is.
func pastTTL(item map[string]types.AttributeValue, now time.Time) bool {
	d := decoder{item: item}
	ttl := d.int(AttrExpiresAt, true)
	return d.err == nil && ttl < now.Unix()
}

// withChunks completes rec, decoded from item, with its body's chunks: one
// BatchGetItem, consistent, whose unprocessed keys are asked again a bounded
// number of times, after an exponential backoff with jitter (chunkRetry)
// that ends with ctx. A record past its TTL whose chunks are gone (TTL deleted
// them) comes back without its Response; a live one is an error.
func (s *Store) withChunks(ctx context.Context, item map[string]types.AttributeValue, rec idempotency.Record) (idempotency.Record, error) {
	ref, ok, err := chunksOf(item)
	if !ok || rec.Response == nil {
		return rec, nil
	}
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("%w (record %s)", err, rec.Key.Short())
	}
	keys := make([]map[string]types.AttributeValue, ref.n)
	for i := range keys {
		keys[i] = map[string]types.AttributeValue{AttrPK: str(chunkKey(rec.Key, ref.id, i))}
	}
	parts := map[string][]byte{}
	pending := keys
	for n := 0; len(pending) > 0; n++ { // n reads so far
		if n == s.chunkRetry.attempts {
			return idempotency.Record{}, fmt.Errorf("dynamo: read chunks: %w: %d chunks unprocessed after %d reads", idempotency.ErrUnavailable, len(pending), n)
		}
		if n > 0 {
			if err := wait(ctx, s.chunkRetry.delay(n)); err != nil {
				return idempotency.Record{}, fmt.Errorf("dynamo: read chunks: %w: %w (while backing off, %d chunks unprocessed)", idempotency.ErrUnavailable, err, len(pending))
			}
		}
		var out *dynamodb.BatchGetItemOutput
		err := s.do(ctx, func() error {
			var err error
			out, err = s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: pending, ConsistentRead: aws.Bool(true)},
			}})
			return err
		})
		if err != nil {
			return idempotency.Record{}, s.outcome(ctx, "read chunks", err, nil)
		}
		for _, it := range out.Responses[s.table] {
			pk, _ := it[AttrPK].(*types.AttributeValueMemberS)
			b, _ := it[AttrChunk].(*types.AttributeValueMemberB)
			if pk != nil && b != nil {
				parts[pk.Value] = b.Value
			}
		}
		pending = out.UnprocessedKeys[s.table].Keys
	}
	var stored []byte
	for i := range ref.n {
		part, ok := parts[chunkKey(rec.Key, ref.id, i)]
		if !ok && pastTTL(item, time.Now()) {
			// DynamoDB's TTL deletes the chunks of an expired record on
			// its own schedule, maybe before the record's item. The
			// record counts as absent; its answer, which nobody may
			// replay any more, is gone with them.
			rec.Response = nil
			return rec, nil
		}
		if !ok {
			return idempotency.Record{}, fmt.Errorf("dynamo: read chunks: chunk %d of %d is missing", i, ref.n)
		}
		stored = append(stored, part...)
	}
	if sum := sha256.Sum256(stored); hex.EncodeToString(sum[:]) != ref.sha256 {
		return idempotency.Record{}, errors.New("dynamo: read chunks: the body does not match its checksum")
	}
	encoding, _ := item[AttrResponseEncoding].(*types.AttributeValueMemberS)
	enc := ""
	if encoding != nil {
		enc = encoding.Value
	}
	body, err := decodeBody(stored, enc)
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("dynamo: read chunks: %w", err)
	}
	rec.Response.Body = body
	return rec, nil
}
