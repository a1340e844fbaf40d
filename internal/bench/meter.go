package bench

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Meter counts the DynamoDB calls made through the clients it wraps, by
// operation, and the capacity units they consumed. It asks DynamoDB for them
// (ReturnConsumedCapacity TOTAL, set on every call by an SDK middleware, so
// that the code under measurement is unchanged) and takes the read units and
// those of single-item writes from the answers. DynamoDB Local's figure for a
// transaction is not AWS's (it reports 4 units for a one-item transaction of
// 100 bytes, where AWS documents 2), and a failed call reports none, on AWS
// as on DynamoDB Local, although a failed conditional write consumes units and
// a cancelled transaction consumes those of all of its items: the Meter
// computes the units of transactions and of failed writes from the item
// sizes, as the DynamoDB Developer Guide documents them (see writeCost), and
// counts them as computed. It is safe for concurrent use.
type Meter struct {
	mu      sync.Mutex
	t       Tally
	pending []pendingItem
}

// pendingItem is an item written by a transaction, not in its input (an
// update, a condition check, or a delete), whose size the Meter reads once
// the calls are done (Settle): the item as it stands then.
type pendingItem struct {
	table  string
	key    map[string]types.AttributeValue
	factor float64
}

// Tally is what a Meter counted.
type Tally struct {
	// Calls is the number of attempts of each operation (an SDK retry is
	// an attempt of its own, as DynamoDB bills it).
	Calls map[string]int
	// RCU and WCU are the read and write capacity units consumed.
	RCU, WCU float64
	// ComputedWCU is the part of WCU computed from item sizes.
	ComputedWCU float64
	// LocalTxnWCU is what DynamoDB Local reported for the transactions whose
	// units were computed, ComputedTxnWCU what they were computed to.
	LocalTxnWCU, ComputedTxnWCU float64
	// CheckedPuts counts the successful PutItems whose reported units were
	// compared with those computed from the item's size, and PutsBelow
	// those reported below the computation.
	CheckedPuts, PutsBelow int
}

// total is the number of calls in t.
func (t Tally) total() int {
	n := 0
	for _, c := range t.Calls {
		n += c
	}
	return n
}

// add adds u to t.
func (t *Tally) add(u Tally) {
	if t.Calls == nil {
		t.Calls = map[string]int{}
	}
	for op, n := range u.Calls {
		t.Calls[op] += n
	}
	t.RCU += u.RCU
	t.WCU += u.WCU
	t.ComputedWCU += u.ComputedWCU
	t.LocalTxnWCU += u.LocalTxnWCU
	t.ComputedTxnWCU += u.ComputedTxnWCU
	t.CheckedPuts += u.CheckedPuts
	t.PutsBelow += u.PutsBelow
}

// Settle sizes the items the counted transactions wrote without naming
// them whole, reading them through client (which must not be counted), and
// adds their units.
func (m *Meter) Settle(ctx context.Context, client *dynamodb.Client) error {
	m.mu.Lock()
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	var units float64
	for _, p := range pending {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(p.table), Key: p.key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return fmt.Errorf("bench: size a written item: %w", err)
		}
		units += p.factor * writeUnits(ItemSize(out.Item))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t.WCU += units
	m.t.ComputedWCU += units
	m.t.ComputedTxnWCU += units
	return nil
}

// Take returns what m counted since the last Take and starts again; Settle
// it first.
func (m *Meter) Take() Tally {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t
	m.t = Tally{}
	if t.Calls == nil {
		t.Calls = map[string]int{}
	}
	return t
}

// Reset drops what m counted so far.
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t, m.pending = Tally{}, nil
}

// cost is what one call consumed.
type cost struct {
	rcu, wcu, computed float64
	// localTxn is what DynamoDB Local reported for a transaction.
	localTxn float64
	pending  []pendingItem
	// checked: a PutItem whose reported units were compared with the
	// computation; below: reported below it.
	checked, below bool
}

func (m *Meter) record(op string, c cost) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t.Calls == nil {
		m.t.Calls = map[string]int{}
	}
	m.t.Calls[op]++
	m.t.RCU += c.rcu
	m.t.WCU += c.wcu + c.computed
	m.t.ComputedWCU += c.computed
	if op == "TransactWriteItems" && c.localTxn > 0 {
		m.t.LocalTxnWCU += c.localTxn
		m.t.ComputedTxnWCU += c.computed
	}
	if c.checked {
		m.t.CheckedPuts++
	}
	if c.below {
		m.t.PutsBelow++
	}
	m.pending = append(m.pending, c.pending...)
}

// Wrap returns a client that behaves as client does, with m counting its
// calls.
func (m *Meter) Wrap(client *dynamodb.Client) *dynamodb.Client {
	o := client.Options()
	o.APIOptions = append(slices.Clip(o.APIOptions), m.middleware)
	return dynamodb.New(o)
}

type inputKey struct{}

func (m *Meter) middleware(stack *middleware.Stack) error {
	ask := middleware.InitializeMiddlewareFunc("bench.ReturnConsumedCapacity", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		in.Parameters = withConsumedCapacity(in.Parameters)
		ctx = middleware.WithStackValue(ctx, inputKey{}, in.Parameters)
		return next.HandleInitialize(ctx, in)
	})
	if err := stack.Initialize.Add(ask, middleware.Before); err != nil {
		return err
	}
	// After the retry middleware: once per attempt.
	count := middleware.FinalizeMiddlewareFunc("bench.Meter", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleFinalize(ctx, in)
		op := awsmiddleware.GetOperationName(ctx)
		input := middleware.GetStackValue(ctx, inputKey{})
		if err != nil {
			m.record(op, failedCost(input, err))
		} else {
			m.record(op, succeededCost(op, input, out.Result))
		}
		return out, md, err
	})
	return stack.Finalize.Add(count, middleware.After)
}

// withConsumedCapacity returns a copy of the operation input in with
// ReturnConsumedCapacity TOTAL, or in itself for an operation without it.
func withConsumedCapacity(in any) any {
	v := reflect.ValueOf(in)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return in
	}
	if f := v.Elem().FieldByName("ReturnConsumedCapacity"); !f.IsValid() || f.Type() != reflect.TypeFor[types.ReturnConsumedCapacity]() {
		return in
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	c.Elem().FieldByName("ReturnConsumedCapacity").Set(reflect.ValueOf(types.ReturnConsumedCapacityTotal))
	return c.Interface()
}

// reads are the operations that consume read capacity.
var reads = map[string]bool{"GetItem": true, "BatchGetItem": true, "TransactGetItems": true, "Query": true, "Scan": true}

// succeededCost is what a successful call consumed: the units DynamoDB
// reported, but for a transaction, whose units are computed.
func succeededCost(op string, in, result any) cost {
	rcu, wcu := reported(op, result)
	switch v := in.(type) {
	case *dynamodb.TransactWriteItemsInput:
		c := cost{localTxn: wcu}
		for _, ti := range v.TransactItems {
			table, item, whole := transactItem(ti)
			switch {
			case whole:
				c.computed += 2 * writeUnits(ItemSize(item))
			case ti.Delete != nil:
				c.computed += 2 // the item is gone: one unit, twice
			default:
				c.pending = append(c.pending, pendingItem{table: table, key: item, factor: 2})
			}
		}
		return c
	case *dynamodb.PutItemInput:
		computed := writeUnits(ItemSize(v.Item))
		return cost{rcu: rcu, wcu: wcu, checked: true, below: wcu < computed}
	}
	return cost{rcu: rcu, wcu: wcu}
}

// reported returns the capacity units a successful call's answer reports:
// its ConsumedCapacity, one or a list.
func reported(op string, result any) (rcu, wcu float64) {
	v := reflect.ValueOf(result)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, 0
	}
	f := v.Elem().FieldByName("ConsumedCapacity")
	if !f.IsValid() {
		return 0, 0 // an operation without capacity (DescribeTable...)
	}
	var ccs []types.ConsumedCapacity
	switch cc := f.Interface().(type) {
	case *types.ConsumedCapacity:
		if cc != nil {
			ccs = []types.ConsumedCapacity{*cc}
		}
	case []types.ConsumedCapacity:
		ccs = cc
	}
	for _, cc := range ccs {
		switch {
		case cc.ReadCapacityUnits != nil || cc.WriteCapacityUnits != nil:
			rcu += deref(cc.ReadCapacityUnits)
			wcu += deref(cc.WriteCapacityUnits)
		case reads[op]:
			rcu += deref(cc.CapacityUnits)
		default:
			wcu += deref(cc.CapacityUnits)
		}
	}
	return rcu, wcu
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

// failedCost computes the write units a failed write consumed, as the
// DynamoDB Developer Guide documents them: a conditional write whose
// condition fails consumes the units of the larger of the item it would
// have written and the existing one (one unit when there is none); a
// cancelled transaction consumes the units of every item it holds, twice,
// as a transaction's writes do. The existing items are those the failure
// returns (ReturnValuesOnConditionCheckFailure ALL_OLD), or, for a
// transaction's update, delete or condition check whose item was not
// returned, the item as it stands (Settle). Any other failure (throttling,
// validation, a network error) consumes nothing.
func failedCost(in any, err error) cost {
	var ccf *types.ConditionalCheckFailedException
	var cancelled *types.TransactionCanceledException
	switch {
	case errors.As(err, &ccf):
		var written map[string]types.AttributeValue
		if p, ok := in.(*dynamodb.PutItemInput); ok {
			written = p.Item
		}
		return cost{computed: writeUnits(max(ItemSize(written), ItemSize(ccf.Item)))}
	case errors.As(err, &cancelled):
		tw, ok := in.(*dynamodb.TransactWriteItemsInput)
		if !ok {
			return cost{}
		}
		var c cost
		for i, ti := range tw.TransactItems {
			var existing map[string]types.AttributeValue
			if i < len(cancelled.CancellationReasons) {
				existing = cancelled.CancellationReasons[i].Item
			}
			table, item, whole := transactItem(ti)
			switch {
			case whole || existing != nil:
				c.computed += 2 * writeUnits(max(ItemSize(item), ItemSize(existing)))
			default:
				c.pending = append(c.pending, pendingItem{table: table, key: item, factor: 2})
			}
		}
		return c
	}
	return cost{}
}

// transactItem returns the table of a transaction's action and the item it
// writes (whole: a put), or its key.
func transactItem(ti types.TransactWriteItem) (table string, item map[string]types.AttributeValue, whole bool) {
	switch {
	case ti.Put != nil:
		return aws.ToString(ti.Put.TableName), ti.Put.Item, true
	case ti.Update != nil:
		return aws.ToString(ti.Update.TableName), ti.Update.Key, false
	case ti.Delete != nil:
		return aws.ToString(ti.Delete.TableName), ti.Delete.Key, false
	case ti.ConditionCheck != nil:
		return aws.ToString(ti.ConditionCheck.TableName), ti.ConditionCheck.Key, false
	}
	return "", nil, false
}
