package dynamo

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/internal/nilness"
)

// Store is an idempotency.Store backed by one DynamoDB table laid out as
// ItemFromRecord describes. It is safe for concurrent use.
type Store struct {
	client     Client
	table      string
	retry      conflictRetry
	chunkRetry conflictRetry
}

// Option configures a Store.
type Option func(*Store)

// WithConflictRetry sets how often a write cancelled by a concurrent
// transaction on the same item is attempted in all (default 5), and the full
// jitter backoff between attempts: a random delay up to base doubled per
// attempt, capped at max (default 5ms and 50ms).
func WithConflictRetry(attempts int, base, max time.Duration) Option {
	return func(s *Store) {
		s.retry = conflictRetry{attempts: attempts, base: base, max: max}
	}
}

// ErrMisconfigured is what Validate's error matches: a Store built without
// what it needs to reach its table.
var ErrMisconfigured = errors.New("dynamo: the Store is misconfigured")

// New returns a Store that keeps records in table through client. It takes
// a nil client or an empty table without an error, as it always has; they
// are Validate's to report, and idempotency.New calls it, so that the
// mistake (a constructor's error ignored, an environment variable not set)
// fails at start-up rather than at every request.
func New(client Client, table string, opts ...Option) *Store {
	s := &Store{client: client, table: table, retry: defaultConflictRetry, chunkRetry: chunkRetry}
	for _, o := range opts {
		o(s)
	}
	s.retry = s.retry.withDefaults()
	return s
}

// Validate reports, in an error matching ErrMisconfigured and naming each,
// what the Store lacks: a client (nil, or an interface holding a nil
// pointer) or a table name. idempotency.New calls it on its Config.Store;
// the Store's other users can too.
func (s *Store) Validate() error {
	if s == nil {
		return fmt.Errorf("%w: the Store is nil", ErrMisconfigured)
	}
	var missing []string
	if nilness.Nil(s.client) {
		missing = append(missing, "the DynamoDB client is nil")
	}
	if s.table == "" {
		missing = append(missing, "the table name is empty")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrMisconfigured, strings.Join(missing, "; "))
}

// Conditions. #status and friends are expression attribute names because
// STATUS (and others) are DynamoDB reserved words.
const (
	// reclaimCondition is Record.Reclaimable: no record, or an expired one
	// that is COMPLETED or a reservation that is not External (never an
	// UNKNOWN record, nor an External reservation). The states are named,
	// not excluded, so that a record of any other status is never taken.
	reclaimCondition = "attribute_not_exists(#pk) OR " +
		"(#expires_ms <= :now AND (#status = :completed OR #status = :in_progress AND #external = :false))"
	// leaseCondition holds while the lease is held: the record carries the
	// lease token and is not COMPLETED.
	leaseCondition = "#lease = :lease AND #status <> :completed"
)

func reclaimExpr(now time.Time) (map[string]string, map[string]types.AttributeValue) {
	return map[string]string{
			"#pk":         AttrPK,
			"#expires_ms": AttrExpiresAtMS,
			"#status":     AttrStatus,
			"#external":   AttrExternal,
		}, map[string]types.AttributeValue{
			":now":         num(now.UnixMilli()),
			":completed":   str(string(idempotency.StatusCompleted)),
			":in_progress": str(string(idempotency.StatusInProgress)),
			":false":       &types.AttributeValueMemberBOOL{Value: false},
		}
}

// ReclaimCheck returns the ConditionCheck, for a TransactWriteItems of the
// caller's own on table, that key has no record holding it at now: none, or
// one Record.Reclaimable at now (an expired COMPLETED record, or an expired
// reservation that is not External), the condition Reserve and Commit write
// under. An UNKNOWN record, an External reservation (expired or not) or an
// unexpired record fails it, with its item returned (ALL_OLD, for
// RecordFromItem) in the transaction's cancellation reason. It is how a
// write elsewhere (an operator settling what a key's request held) is fenced
// on the key being free, under the store's own rule. key must be a record's
// key (NewKey's Hash, 64 hex digits): a zero Hash names no record, and so
// passes; a caller given a hash checks its shape first.
func ReclaimCheck(table string, key idempotency.Key, now time.Time) types.ConditionCheck {
	names, values := reclaimExpr(now)
	return types.ConditionCheck{
		TableName:                           aws.String(table),
		Key:                                 map[string]types.AttributeValue{AttrPK: str(key.ID())},
		ConditionExpression:                 aws.String(reclaimCondition),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

func leaseExpr(lease string) (map[string]string, map[string]types.AttributeValue) {
	return map[string]string{
			"#lease":  AttrLeaseToken,
			"#status": AttrStatus,
		}, map[string]types.AttributeValue{
			":lease":     str(lease),
			":completed": str(string(idempotency.StatusCompleted)),
		}
}

// Commit writes rec and effects in one TransactWriteItems, conditioned on the
// key being free or reclaimable at now. It returns a *idempotency.ConflictError
// carrying the existing record when the key is taken, an error naming the
// effect when an effect's item already exists, and an error wrapping
// idempotency.ErrUnavailable when DynamoDB could not be reached or throttled.
func (s *Store) Commit(ctx context.Context, rec idempotency.Record, effects []idempotency.Effect, now time.Time) error {
	names, values := reclaimExpr(now)
	item, chunks, err := recordItems(rec)
	if err != nil {
		return fmt.Errorf("dynamo: commit: %w", err)
	}
	put := &types.Put{
		TableName:                           aws.String(s.table),
		Item:                                item,
		ConditionExpression:                 aws.String(reclaimCondition),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	return s.transact(ctx, "commit", types.TransactWriteItem{Put: put}, s.chunkPuts(chunks), effects, isRecord(rec))
}

// Reserve writes rec with one conditional PutItem, under Commit's condition,
// or with effects (the reservation's holds) one TransactWriteItems, and
// returns the same errors as Commit. A new reservation (IN_PROGRESS) whose
// request or data is over its bound (MaxRequest, MaxData) is refused with
// ErrRequestTooLarge or ErrDataTooLarge; a record restored as it stood (the
// recovery sweeper's UNKNOWN) carries them as they are, DynamoDB's 400 KB
// being its only bound.
func (s *Store) Reserve(ctx context.Context, rec idempotency.Record, effects []idempotency.Effect, now time.Time) error {
	if rec.Status == idempotency.StatusInProgress {
		if err := checkRecord(rec); err != nil {
			return fmt.Errorf("dynamo: reserve: %w", err)
		}
	}
	names, values := reclaimExpr(now)
	if len(effects) > 0 {
		put := &types.Put{
			TableName:                           aws.String(s.table),
			Item:                                ItemFromRecord(rec),
			ConditionExpression:                 aws.String(reclaimCondition),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		return s.transact(ctx, "reserve", types.TransactWriteItem{Put: put}, nil, effects, isRecord(rec))
	}
	in := &dynamodb.PutItemInput{
		TableName:                           aws.String(s.table),
		Item:                                ItemFromRecord(rec),
		ConditionExpression:                 aws.String(reclaimCondition),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	return s.put(ctx, "reserve", in, isRecord(rec))
}

// Complete replaces the record held under lease with rec, which must be
// COMPLETED: one conditional PutItem, or with effects one
// TransactWriteItems. When the lease is no longer held it returns a
// *idempotency.ConflictError carrying the current record, with a nil
// Existing when there is none; a rec of another status is an error
// wrapping idempotency.ErrNotCompleted, and nothing is written.
func (s *Store) Complete(ctx context.Context, rec idempotency.Record, lease string, effects []idempotency.Effect) error {
	if rec.Status != idempotency.StatusCompleted {
		// Only a COMPLETED record is given its retention's TTL, on its
		// item and its answer's chunks alike (ItemFromRecord).
		return fmt.Errorf("dynamo: complete: %w: the record is %q", idempotency.ErrNotCompleted, rec.Status)
	}
	names, values := leaseExpr(lease)
	item, chunks, err := recordItems(rec)
	if err != nil {
		return fmt.Errorf("dynamo: complete: %w", err)
	}
	if len(effects) > 0 || len(chunks) > 0 {
		put := &types.Put{
			TableName:                           aws.String(s.table),
			Item:                                item,
			ConditionExpression:                 aws.String(leaseCondition),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		return s.transact(ctx, "complete", types.TransactWriteItem{Put: put}, s.chunkPuts(chunks), effects, isRecord(rec))
	}
	in := &dynamodb.PutItemInput{
		TableName:                           aws.String(s.table),
		Item:                                item,
		ConditionExpression:                 aws.String(leaseCondition),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	return s.put(ctx, "complete", in, isRecord(rec))
}

// chunkPuts are the puts of a body's chunk items.
func (s *Store) chunkPuts(chunks []map[string]types.AttributeValue) []types.TransactWriteItem {
	out := make([]types.TransactWriteItem, len(chunks))
	for i, c := range chunks {
		out[i] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: c}}
	}
	return out
}

// Release deletes the record held under lease with one conditional
// DeleteItem, or with effects one TransactWriteItems, returning a
// *idempotency.ConflictError as Complete does.
func (s *Store) Release(ctx context.Context, key idempotency.Key, lease string, effects []idempotency.Effect) error {
	names, values := leaseExpr(lease)
	k := map[string]types.AttributeValue{AttrPK: str(key.ID())}
	if len(effects) > 0 {
		del := &types.Delete{
			TableName:                           aws.String(s.table),
			Key:                                 k,
			ConditionExpression:                 aws.String(leaseCondition),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		return s.transact(ctx, "release", types.TransactWriteItem{Delete: del}, nil, effects, nil)
	}
	in := &dynamodb.DeleteItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 k,
		ConditionExpression:                 aws.String(leaseCondition),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	err := s.do(ctx, func() error {
		_, err := s.client.DeleteItem(ctx, in)
		return err
	})
	return s.outcome(ctx, "release", err, nil)
}

// Advance moves the record held under lease, of the status p.Status and
// External as p.External says, to the recovery point p with one
// conditional UpdateItem, or with effects one TransactWriteItems,
// returning a *idempotency.ConflictError as Complete does (a record at
// another point too), an error wrapping idempotency.ErrStatusMismatch for
// a record held under lease at p.From but of another status or External,
// an error for an invalid p.Status
// (idempotency.Progress.RecordStatus), and ErrDataTooLarge for a step
// whose data is over MaxData (p.Added; what the record carries is not
// checked again) or would make the record larger than DynamoDB's 400 KB.
func (s *Store) Advance(ctx context.Context, key idempotency.Key, lease string, p idempotency.Progress, effects []idempotency.Effect) error {
	if err := checkProgress(p); err != nil {
		return fmt.Errorf("dynamo: advance: %w", err)
	}
	status, err := p.RecordStatus()
	if err != nil {
		return fmt.Errorf("dynamo: advance: %w", err)
	}
	names, values := leaseExpr(lease)
	names["#point"] = AttrPoint
	names["#data"] = AttrData
	names["#expires"] = AttrExpiresAt
	names["#expires_ms"] = AttrExpiresAtMS
	names["#updated"] = AttrUpdatedAt
	names["#external"] = AttrExternal
	expiresMS := p.ExpiresAt.UnixMilli()
	values[":status"] = str(string(status))
	values[":external"] = &types.AttributeValueMemberBOOL{Value: p.External}
	values[":new_lease"] = str(p.LeaseToken)
	values[":point"] = str(p.Point)
	values[":data"] = strMap(p.Data)
	values[":expires_ms"] = num(expiresMS)
	values[":now"] = num(p.UpdatedAt.UnixMilli())
	// #external is always present (ItemFromRecord): the condition holds
	// only for the kind of record the update below is written for.
	cond := leaseCondition + " AND #status = :status AND #external = :external AND attribute_not_exists(#point)"
	if p.From != "" {
		cond = leaseCondition + " AND #status = :status AND #external = :external AND #point = :from"
		values[":from"] = str(p.From)
	}
	// The TTL attribute of a reservation that is not External moves with
	// the expiry, a day past it (ReservationTTLMargin): a lease renewed or
	// taken over long after the reservation must not sit under a TTL
	// already past, which DynamoDB may act on at any moment, freeing the
	// key while its owner runs. An External reservation, and an UNKNOWN
	// record a Resolver resumes, have none (removed, from an item written
	// before they lost theirs): TTL must never delete them (see
	// ItemFromRecord).
	update := "SET #point = :point, #data = :data, #lease = :new_lease, " +
		"#expires = :expires, #expires_ms = :expires_ms, #updated = :now"
	switch {
	case status == idempotency.StatusUnknown:
		// A Resolver resuming the phases after p.Point: they may call
		// out again, so the settle wait runs from here
		// (Record.UnknownSince).
		names["#unknown_since"] = AttrUnknownSince
		update = "SET #point = :point, #data = :data, #lease = :new_lease, " +
			"#expires_ms = :expires_ms, #updated = :now, #unknown_since = :now REMOVE #expires"
	case !hasTTL(status, p.External):
		update = "SET #point = :point, #data = :data, #lease = :new_lease, " +
			"#expires_ms = :expires_ms, #updated = :now REMOVE #expires"
	default:
		values[":expires"] = num(ceilSeconds(expiresMS + ReservationTTLMargin.Milliseconds()))
	}
	k := map[string]types.AttributeValue{AttrPK: str(key.ID())}
	// The write is already in place when the record is at p under its lease
	// token and update time.
	landed := func(r idempotency.Record) bool {
		return r.Status == status && r.External == p.External && r.Point == p.Point && r.LeaseToken == p.LeaseToken && r.UpdatedAt.UnixMilli() == p.UpdatedAt.UnixMilli()
	}
	if len(effects) > 0 {
		u := &types.Update{
			TableName:                           aws.String(s.table),
			Key:                                 k,
			UpdateExpression:                    aws.String(update),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		return statusMismatch(s.transact(ctx, "advance", types.TransactWriteItem{Update: u}, nil, effects, landed), lease, p.From, status, p.External)
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 k,
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	err = s.do(ctx, func() error {
		_, err := s.client.UpdateItem(ctx, in)
		return err
	})
	return statusMismatch(s.outcome(ctx, "advance", err, landed), lease, p.From, status, p.External)
}

// statusMismatch turns Advance's conflict over a record still held under
// lease at from, but of another status than status (not COMPLETED) or
// External other than external, into an error wrapping
// idempotency.ErrStatusMismatch: the caller's mistake, not a lost lease.
// Other errors pass through.
func statusMismatch(err error, lease, from string, status idempotency.Status, external bool) error {
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Existing == nil {
		return err
	}
	e := c.Existing
	if e.LeaseToken != lease || e.Point != from || e.Status == idempotency.StatusCompleted {
		return err
	}
	switch {
	case e.Status != status:
		return fmt.Errorf("dynamo: advance: %w: the record is %s, Progress.Status %s", idempotency.ErrStatusMismatch, e.Status, status)
	case e.External != external:
		return fmt.Errorf("dynamo: advance: %w: the record's External is %v, Progress.External %v", idempotency.ErrStatusMismatch, e.External, external)
	}
	return err
}

// MarkUnknown moves the record held under lease to UNKNOWN with newLease and
// expiresAt, with one conditional UpdateItem, returning a
// *idempotency.ConflictError as Complete does. The record loses its TTL
// attribute (see ItemFromRecord): expiresAt ends nothing (the reclaim
// condition never lets an UNKNOWN record through); the redrive and oncectl
// read it. unknown_since_ms (Record.UnknownSince) becomes now unless the
// item has it: a redrive of an UNKNOWN record keeps when it first went
// UNKNOWN, and only an UNKNOWN item carries it (ItemFromRecord), so an
// IN_PROGRESS record, or an UNKNOWN one written before the attribute
// existed, gets now.
func (s *Store) MarkUnknown(ctx context.Context, key idempotency.Key, lease, newLease string, expiresAt, now time.Time) error {
	names, values := leaseExpr(lease)
	names["#expires"] = AttrExpiresAt
	names["#expires_ms"] = AttrExpiresAtMS
	names["#updated"] = AttrUpdatedAt
	names["#unknown_since"] = AttrUnknownSince
	expiresMS := expiresAt.UnixMilli()
	values[":unknown"] = str(string(idempotency.StatusUnknown))
	values[":new_lease"] = str(newLease)
	values[":expires_ms"] = num(expiresMS)
	values[":now"] = num(now.UnixMilli())
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table),
		Key:       map[string]types.AttributeValue{AttrPK: str(key.ID())},
		UpdateExpression: aws.String("SET #status = :unknown, #lease = :new_lease, " +
			"#expires_ms = :expires_ms, #updated = :now, #unknown_since = if_not_exists(#unknown_since, :now) REMOVE #expires"),
		ConditionExpression:                 aws.String(leaseCondition),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	// The write is already in place when the record is UNKNOWN under newLease
	// with this expiry and update time.
	landed := func(r idempotency.Record) bool {
		return r.Status == idempotency.StatusUnknown && r.LeaseToken == newLease &&
			r.ExpiresAt.UnixMilli() == expiresMS && r.UpdatedAt.UnixMilli() == now.UnixMilli()
	}
	err := s.do(ctx, func() error {
		_, err := s.client.UpdateItem(ctx, in)
		return err
	})
	return s.outcome(ctx, "mark unknown", err, landed)
}

// Get reads the record for key with a strongly consistent GetItem. It returns
// an error wrapping idempotency.ErrNotFound when there is none. A record past
// its TTL whose answer's chunk items DynamoDB's TTL has deleted comes back
// without its Response (it counts as absent: nobody may replay it), as does
// the record a failed condition carries.
func (s *Store) Get(ctx context.Context, key idempotency.Key) (idempotency.Record, error) {
	var out *dynamodb.GetItemOutput
	err := s.do(ctx, func() error {
		var err error
		out, err = s.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(s.table),
			Key:            map[string]types.AttributeValue{AttrPK: str(key.ID())},
			ConsistentRead: aws.Bool(true),
		})
		return err
	})
	if err != nil {
		return idempotency.Record{}, s.outcome(ctx, "get", err, nil)
	}
	if len(out.Item) == 0 {
		return idempotency.Record{}, fmt.Errorf("dynamo: get: %w", idempotency.ErrNotFound)
	}
	rec, err := RecordFromItem(out.Item)
	if err == nil {
		rec, err = s.withChunks(ctx, out.Item, rec)
	}
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("dynamo: get: %w", err)
	}
	return rec, nil
}

// put runs a conditional PutItem.
func (s *Store) put(ctx context.Context, op string, in *dynamodb.PutItemInput, landed func(idempotency.Record) bool) error {
	err := s.do(ctx, func() error {
		_, err := s.client.PutItem(ctx, in)
		return err
	})
	return s.outcome(ctx, op, err, landed)
}

// transact writes the record's item (its Put, Update or Delete), the extra
// items that go with it (a body's chunks) and the effects in one
// TransactWriteItems. A failed condition of the record's item is a conflict;
// one of an effect's, a *idempotency.RejectedError.
func (s *Store) transact(ctx context.Context, op string, record types.TransactWriteItem, extra []types.TransactWriteItem, effects []idempotency.Effect, landed func(idempotency.Record) bool) error {
	items := make([]types.TransactWriteItem, 0, 1+len(extra)+len(effects))
	items = append(items, record)
	items = append(items, extra...)
	first := len(items) // the first effect's index
	rejects := make([]func(map[string]types.AttributeValue) error, len(effects))
	for i, e := range effects {
		item, reject, err := transactItem(e)
		if err != nil {
			return fmt.Errorf("dynamo: %s: effect %d: %w", op, i, err)
		}
		items = append(items, item)
		rejects[i] = reject
	}
	if err := checkTransaction(items); err != nil {
		return fmt.Errorf("dynamo: %s: %w", op, err)
	}
	// The SDK gives the call a ClientRequestToken, so its own retry of a
	// transaction that had landed succeeds; each of our attempts gets a new
	// one, as a cancelled transaction wrote nothing.
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items}
	err := s.do(ctx, func() error {
		in.ClientRequestToken = nil
		_, err := s.client.TransactWriteItems(ctx, in)
		return err
	})
	if i, msg, ok := itemTooLarge(err); ok {
		if j := i - first; j >= 0 && j < len(effects) {
			return fmt.Errorf("dynamo: %s: effect %d on %s: %w (DynamoDB: %s)", op, j, effects[j].EffectTable(), ErrItemTooLarge, msg)
		}
		// The record's item, or a chunk's: checked before the write, they
		// grow past 400 KB only with a recovery point's data (Advance).
	}
	var canceled *types.TransactionCanceledException
	if _, recordFailed := conditionFailed(err); !recordFailed && errors.As(err, &canceled) {
		for i, r := range canceled.CancellationReasons {
			j := i - first
			if j < 0 || j >= len(effects) || aws.ToString(r.Code) != reasonConditionalCheckFailed {
				continue
			}
			e := effects[j]
			rej := &idempotency.RejectedError{Index: j, Table: e.EffectTable()}
			if reject := rejects[j]; reject != nil {
				rej.Err = reject(r.Item)
			}
			if rej.Err == nil {
				rej.Err = fmt.Errorf("dynamo: %s: the condition of effect %d on %s failed: %w", op, j, e.EffectTable(), err)
			}
			return rej
		}
	}
	return s.outcome(ctx, op, err, landed)
}

// outcome turns a write's error into the Store contract's: nil, a
// *idempotency.ConflictError, an error wrapping idempotency.ErrUnavailable,
// or another error. landed, if set, recognises the call's own write in the
// item a failed condition returned (see the package documentation).
func (s *Store) outcome(ctx context.Context, op string, err error, landed func(idempotency.Record) bool) error {
	if err == nil {
		return nil
	}
	if item, ok := conditionFailed(err); ok {
		if item == nil {
			return &idempotency.ConflictError{}
		}
		existing, derr := RecordFromItem(item)
		if derr == nil {
			existing, derr = s.withChunks(ctx, item, existing)
		}
		if derr != nil {
			return fmt.Errorf("dynamo: %s: condition failed on an undecodable item: %w", op, derr)
		}
		if landed != nil && landed(existing) {
			return nil
		}
		return &idempotency.ConflictError{Existing: &existing}
	}
	if unavailable(err) {
		return fmt.Errorf("dynamo: %s: %w: %w", op, idempotency.ErrUnavailable, err)
	}
	if _, msg, ok := itemTooLarge(err); ok {
		// The record's item (an effect's is the transaction's error): the
		// store checks its size before it writes, but for what Advance
		// adds to an item it does not read, a recovery point's data.
		return fmt.Errorf("dynamo: %s: %w: the record would be larger than DynamoDB's 400 KB (DynamoDB: %s)", op, ErrDataTooLarge, msg)
	}
	return fmt.Errorf("dynamo: %s: %w", op, err)
}

// isRecord recognises rec as it is stored.
func isRecord(rec idempotency.Record) func(idempotency.Record) bool {
	return func(existing idempotency.Record) bool {
		if rec.LeaseToken == "" || existing.LeaseToken != rec.LeaseToken {
			return false // without a lease token a record is not unique to one call
		}
		stored, err := RecordFromItem(ItemFromRecord(rec))
		return err == nil && reflect.DeepEqual(existing, stored)
	}
}
