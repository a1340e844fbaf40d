package dynamo

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/stream"
)

// Attribute names of an idempotency item (docs/design.md, IdempotencyTable).
const (
	AttrPK              = "pk"                  // S: Key.ID()
	AttrTenant          = "tenant"              // S
	AttrStatus          = "status"              // S: IN_PROGRESS, COMPLETED, UNKNOWN
	AttrRoute           = "route"               // S
	AttrFingerprint     = "fingerprint"         // S
	AttrExternal        = "external"            // BOOL, always present (the reclaim condition reads it)
	AttrLeaseToken      = "lease_token"         // S, absent when empty
	AttrExpiresAt       = "expires_at"          // N: unix seconds, rounded up (the TTL attribute; see ItemFromRecord), absent on an UNKNOWN record and an External reservation
	AttrExpiresAtMS     = "expires_at_ms"       // N: unix milliseconds (the conditions compare it)
	AttrRequest         = "request"             // B, absent when empty
	AttrResponseStatus  = "response_status"     // N, present when the record has a response
	AttrResponseHeaders = "response_headers"    // M of S, absent when there are none
	AttrResponseCookies = "response_set_cookie" // L of S: the Set-Cookie lines, absent when there are none
	AttrResponseBody    = "response_body"       // B, present (maybe empty) when the record has a response
	AttrPoint           = "point"               // S: recovery point, absent when empty
	AttrData            = "data"                // M of S: the phases' data, absent when empty
	AttrCreatedAt       = "created_at"          // N: unix milliseconds, absent when zero
	AttrUpdatedAt       = "updated_at"          // N: unix milliseconds, absent when zero
	AttrUnknownSince    = "unknown_since_ms"    // N: unix milliseconds, when the record first went UNKNOWN; on UNKNOWN records only, absent on one that went UNKNOWN before it existed
)

// ReservationTTLMargin is how far past its lease deadline Store.Advance
// sets the TTL attribute of a reservation that is not External: a Leased
// multi-step request's lease renewed or taken over, which may come long
// after its reservation, must not sit under a TTL already past, which
// DynamoDB may act on at any moment while its new owner runs. An External
// reservation and an UNKNOWN record have no TTL attribute at all (see
// ItemFromRecord).
//
// It is also the margin an External reservation's TTL attribute had,
// past its lease, before External reservations lost it: items written
// then (legacy items) still carry their lease deadline plus a day, which
// DynamoDB's TTL acts on if their lease check was lost and nobody retried.
// The recovery sweeper restores such a deleted reservation as UNKNOWN, and
// `oncectl reannounce -lost` hands every one whose lease has run out to
// the reconciler before that.
const ReservationTTLMargin = 24 * time.Hour

// ExternalReservationTTL is the margin, past its lease, of the TTL
// attribute an External reservation carried before External reservations
// lost theirs (legacy items; see ReservationTTLMargin).
//
// Deprecated: an External reservation has no TTL attribute now; use
// ReservationTTLMargin for what Store.Advance gives a reservation that is
// not External.
const ExternalReservationTTL = ReservationTTLMargin

// ItemFromRecord is the item that stores rec. Times are kept to the
// millisecond; an empty lease token, request, header set or list of
// Set-Cookie lines is left out, and so is UnknownSince but on an UNKNOWN
// record (Store.MarkUnknown relies on no other record carrying it); a
// response's body is always present, empty or not, and compressed from
// CompressAbove bytes when that makes it smaller.
//
// The item of an UNKNOWN record or of an External reservation
// (IN_PROGRESS, External) has no TTL attribute (expires_at), only its
// expiry for the conditions (expires_at_ms): DynamoDB's TTL never deletes
// it. Its request may have had its effect at another system, so it is
// never reclaimable (idempotency.Record.Reclaimable); deleted, it would
// leave its key free for a second execution until the recovery sweeper
// restored it from the stream (which may lag by an hour). An External
// reservation whose lease ran out is handed to the reconciler (UNKNOWN) by
// its lease check or a client's retry (the redrive), or, its check lost,
// by `oncectl reannounce -lost`; only the reconciliation of an UNKNOWN
// record (Complete, Release) or an operator's fenced delete ends it. Every
// Store write that leaves a record UNKNOWN or an External reservation
// (Reserve, Commit, Reserve of a restored record, MarkUnknown, Advance)
// leaves the attribute out or removes it, and Complete sets it again.
// Every other record's TTL is its expiry: the lease deadline of a
// reservation that is not External (Advance gives it ReservationTTLMargin
// more), the retention of a COMPLETED record.
func ItemFromRecord(rec idempotency.Record) map[string]types.AttributeValue {
	expiresMS := rec.ExpiresAt.UnixMilli()
	item := map[string]types.AttributeValue{
		AttrPK:          str(rec.Key.ID()),
		AttrTenant:      str(rec.Key.Tenant),
		AttrStatus:      str(string(rec.Status)),
		AttrRoute:       str(rec.Route),
		AttrFingerprint: str(rec.Fingerprint),
		AttrExternal:    &types.AttributeValueMemberBOOL{Value: rec.External},
		AttrExpiresAtMS: num(expiresMS),
	}
	if hasTTL(rec.Status, rec.External) {
		item[AttrExpiresAt] = num(ceilSeconds(expiresMS))
	}
	if rec.LeaseToken != "" {
		item[AttrLeaseToken] = str(rec.LeaseToken)
	}
	if len(rec.Request) > 0 {
		item[AttrRequest] = &types.AttributeValueMemberB{Value: rec.Request}
	}
	if r := rec.Response; r != nil {
		item[AttrResponseStatus] = num(int64(r.Status))
		if len(r.Header) > 0 {
			item[AttrResponseHeaders] = strMap(r.Header)
		}
		if len(r.SetCookie) > 0 {
			item[AttrResponseCookies] = strList(r.SetCookie)
		}
		body, encoding := encodeBody(r.Body)
		if body == nil {
			body = []byte{} // a nil B would be serialized as an empty attribute value
		}
		item[AttrResponseBody] = &types.AttributeValueMemberB{Value: body}
		if encoding != "" {
			item[AttrResponseEncoding] = str(encoding)
		}
	}
	if rec.Point != "" {
		item[AttrPoint] = str(rec.Point)
	}
	if len(rec.Data) > 0 {
		item[AttrData] = strMap(rec.Data)
	}
	if !rec.CreatedAt.IsZero() {
		item[AttrCreatedAt] = num(rec.CreatedAt.UnixMilli())
	}
	if !rec.UpdatedAt.IsZero() {
		item[AttrUpdatedAt] = num(rec.UpdatedAt.UnixMilli())
	}
	if rec.Status == idempotency.StatusUnknown && !rec.UnknownSince.IsZero() {
		item[AttrUnknownSince] = num(rec.UnknownSince.UnixMilli())
	}
	return item
}

// hasTTL reports whether the item of a record of status, External or not,
// carries the TTL attribute: not an UNKNOWN record's, nor an External
// reservation's (see ItemFromRecord).
func hasTTL(status idempotency.Status, external bool) bool {
	return status != idempotency.StatusUnknown && !(status == idempotency.StatusInProgress && external)
}

// RecordFromItem decodes an item written by ItemFromRecord. Times come back in
// UTC; a response's headers and Set-Cookie lines are nil when there are
// none (an item written before response_set_cookie existed has none) and
// its body is non-nil, decompressed. The body of a record whose answer the store keeps in
// chunk items (see CompressAbove) is not in the item: RecordFromItem leaves it
// empty, and the Store's reads fetch it.
func RecordFromItem(item map[string]types.AttributeValue) (idempotency.Record, error) {
	d := decoder{item: item}
	var rec idempotency.Record
	pk := d.str(AttrPK, true)
	if d.err == nil {
		key, err := idempotency.ParseID(pk)
		if err != nil {
			d.fail(AttrPK, err)
		}
		rec.Key = key
	}
	if tenant, ok := item[AttrTenant]; ok && d.err == nil {
		if s, _ := tenant.(*types.AttributeValueMemberS); s == nil || s.Value != rec.Key.Tenant {
			d.fail(AttrTenant, errors.New("does not match the partition key"))
		}
	}
	rec.Status = idempotency.Status(d.str(AttrStatus, true))
	rec.Route = d.str(AttrRoute, false)
	rec.Fingerprint = d.str(AttrFingerprint, false)
	rec.External = d.bool(AttrExternal)
	rec.LeaseToken = d.str(AttrLeaseToken, false)
	rec.ExpiresAt = d.millis(AttrExpiresAtMS, true)
	if b := d.bin(AttrRequest); len(b) > 0 {
		rec.Request = b
	}
	if _, ok := item[AttrResponseStatus]; ok {
		resp := &idempotency.Response{Status: int(d.int(AttrResponseStatus, true))}
		resp.Header = d.strMap(AttrResponseHeaders)
		resp.SetCookie = d.strList(AttrResponseCookies)
		resp.Body = d.bin(AttrResponseBody)
		// A body in chunk items is not in the item: the store's reads
		// decode it once they have joined the chunks (withChunks).
		_, chunked := item[AttrResponseChunks]
		if enc := d.str(AttrResponseEncoding, false); enc != "" && d.err == nil && !chunked {
			body, err := decodeBody(resp.Body, enc)
			if err != nil {
				d.fail(AttrResponseBody, err)
			}
			resp.Body = body
		}
		if resp.Body == nil {
			resp.Body = []byte{}
		}
		rec.Response = resp
	}
	rec.Point = d.str(AttrPoint, false)
	rec.Data = d.strMap(AttrData)
	rec.CreatedAt = d.millis(AttrCreatedAt, false)
	rec.UpdatedAt = d.millis(AttrUpdatedAt, false)
	rec.UnknownSince = d.millis(AttrUnknownSince, false)
	if d.err != nil {
		return idempotency.Record{}, d.err
	}
	return rec, nil
}

// RecordFromStreamImage decodes a record from a DynamoDB stream image (the
// NewImage or OldImage of an events.DynamoDBEventRecord).
func RecordFromStreamImage(image map[string]events.DynamoDBAttributeValue) (idempotency.Record, error) {
	return RecordFromItem(stream.ToSDK(image))
}

// StreamImageStatus returns the status of the record a stream image holds
// without decoding the rest, or "" when the image has no status string: the
// stream handlers use it to pass over the records that are not theirs.
func StreamImageStatus(image map[string]events.DynamoDBAttributeValue) idempotency.Status {
	v, ok := image[AttrStatus]
	if !ok || v.DataType() != events.DataTypeString {
		return ""
	}
	return idempotency.Status(v.String())
}

// decoder reads typed attributes, keeping the first error.
type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) fail(name string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("dynamo: decode item: attribute %s: %w", name, err)
	}
}

// get returns the attribute name as a T; ok is false when it is absent or of
// another type (recorded as an error) or absent and required.
func get[T types.AttributeValue](d *decoder, name string, required bool) (T, bool) {
	var zero T
	v, ok := d.item[name]
	if !ok {
		if required {
			d.fail(name, errors.New("missing"))
		}
		return zero, false
	}
	t, ok := v.(T)
	if !ok {
		d.fail(name, fmt.Errorf("has type %T, want %T", v, zero))
		return zero, false
	}
	return t, true
}

func (d *decoder) str(name string, required bool) string {
	v, ok := get[*types.AttributeValueMemberS](d, name, required)
	if !ok {
		return ""
	}
	return v.Value
}

func (d *decoder) bool(name string) bool {
	v, ok := get[*types.AttributeValueMemberBOOL](d, name, false)
	return ok && v.Value
}

func (d *decoder) bin(name string) []byte {
	v, ok := get[*types.AttributeValueMemberB](d, name, false)
	if !ok {
		return nil
	}
	return v.Value
}

func (d *decoder) int(name string, required bool) int64 {
	v, ok := get[*types.AttributeValueMemberN](d, name, required)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		d.fail(name, err)
	}
	return n
}

func (d *decoder) millis(name string, required bool) time.Time {
	if _, ok := d.item[name]; !ok && !required {
		return time.Time{}
	}
	return time.UnixMilli(d.int(name, required)).UTC()
}

func (d *decoder) strMap(name string) map[string]string {
	v, ok := get[*types.AttributeValueMemberM](d, name, false)
	if !ok || len(v.Value) == 0 {
		return nil
	}
	out := make(map[string]string, len(v.Value))
	for k, e := range v.Value {
		s, ok := e.(*types.AttributeValueMemberS)
		if !ok {
			d.fail(name, fmt.Errorf("entry %q has type %T, want a string", k, e))
			return nil
		}
		out[k] = s.Value
	}
	return out
}

func (d *decoder) strList(name string) []string {
	v, ok := get[*types.AttributeValueMemberL](d, name, false)
	if !ok || len(v.Value) == 0 {
		return nil
	}
	out := make([]string, len(v.Value))
	for i, e := range v.Value {
		s, ok := e.(*types.AttributeValueMemberS)
		if !ok {
			d.fail(name, fmt.Errorf("element %d has type %T, want a string", i, e))
			return nil
		}
		out[i] = s.Value
	}
	return out
}

func str(s string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: s} }

func strList(l []string) *types.AttributeValueMemberL {
	out := make([]types.AttributeValue, len(l))
	for i, v := range l {
		out[i] = str(v)
	}
	return &types.AttributeValueMemberL{Value: out}
}

func strMap(m map[string]string) *types.AttributeValueMemberM {
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = str(v)
	}
	return &types.AttributeValueMemberM{Value: out}
}

func num(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// ceilSeconds converts unix milliseconds to unix seconds, rounding up.
func ceilSeconds(ms int64) int64 {
	s := ms / 1000
	if ms%1000 > 0 {
		s++
	}
	return s
}
