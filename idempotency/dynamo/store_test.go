package dynamo_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/storetest"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamotest"
)

// newStore returns a Store on fresh tables of DynamoDB Local.
func newStore(t testing.TB, opts ...dynamo.Option) (*dynamo.Store, *dynamodb.Client, dynamotest.Names) {
	t.Helper()
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	return dynamo.New(client, names.ByLogicalID["IdempotencyTable"], opts...), client, names
}

func TestConformance(t *testing.T) {
	// One set of tables for the whole suite: its tests use keys of their own.
	s, client, names := newStore(t)
	storetest.Run(t, func(t *testing.T) (idempotency.Store, storetest.Inspect) {
		return s, storetest.Inspect{
			EffectTable: names.ByLogicalID["PaymentsTable"],
			Effects: func(t *testing.T) map[string]storetest.EffectItem {
				t.Helper()
				m := map[string]storetest.EffectItem{}
				p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{
					TableName:      aws.String(names.ByLogicalID["PaymentsTable"]),
					ConsistentRead: aws.Bool(true),
				})
				for p.HasMorePages() {
					out, err := p.NextPage(t.Context())
					if err != nil {
						t.Fatalf("Scan(%s): %v", names.ByLogicalID["PaymentsTable"], err)
					}
					var items []storetest.EffectItem
					if err := attributevalue.UnmarshalListOfMaps(out.Items, &items); err != nil {
						t.Fatal(err)
					}
					for _, it := range items {
						m[it.PK] = it
					}
				}
				return m
			},
			Insert: func(item storetest.EffectItem) idempotency.Effect {
				return dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", item)
			},
			Require: func(pk string, reject error) idempotency.Effect {
				return dynamo.Check{
					Table: names.ByLogicalID["PaymentsTable"], Key: map[string]any{"pk": pk},
					Condition: "attribute_exists(pk)",
					Reject:    func(map[string]types.AttributeValue) error { return reject },
				}
			},
			ExpireTTL: func(t *testing.T, key idempotency.Key, now time.Time) bool {
				t.Helper()
				return expireTTL(t, client, names.ByLogicalID["IdempotencyTable"], key.ID(), now)
			},
		}
	})
}

// expireTTL deletes the item pk of table as DynamoDB's TTL process would
// at now, reporting whether it did: an item whose TTL attribute (a number,
// unix seconds) is before now; one without it is never deleted.
func expireTTL(t *testing.T, client *dynamodb.Client, table, pk string, now time.Time) bool {
	t.Helper()
	_, err := client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: pk}},
		ConditionExpression:       aws.String("attribute_type(#ttl, :n) AND #ttl < :now"),
		ExpressionAttributeNames:  map[string]string{"#ttl": dynamo.AttrExpiresAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberS{Value: "N"}, ":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Unix(), 10)}},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return false
	}
	if err != nil {
		t.Fatalf("DeleteItem(%s, as TTL at %v): %v", table, now, err)
	}
	return true
}

func TestStoredItem(t *testing.T) {
	store, client, names := newStore(t)
	ctx := t.Context()
	t0 := time.Date(2040, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	key := idempotency.NewKey("acme", "raw")
	rec := idempotency.Record{
		Key: key, Status: idempotency.StatusInProgress, Route: "POST /v1/charges", Fingerprint: "f00d",
		External: true, LeaseToken: "lease-1", ExpiresAt: t0, Request: []byte(`{"a":1}`),
		CreatedAt: t0.Add(-30 * time.Second), UpdatedAt: t0.Add(-30 * time.Second),
	}
	if err := store.Reserve(ctx, rec, nil, t0.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	expires := t0.Add(24*time.Hour + 1500*time.Microsecond)
	if err := store.MarkUnknown(ctx, key, "lease-1", "lease-2", expires, t0); err != nil {
		t.Fatal(err)
	}
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(names.ByLogicalID["IdempotencyTable"]),
		Key:            map[string]types.AttributeValue{"pk": s(key.ID())},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := dynamo.ItemFromRecord(rec)
	want["status"] = s("UNKNOWN")
	want["lease_token"] = s("lease-2")
	delete(want, "expires_at") // an UNKNOWN record has no TTL attribute
	want["expires_at_ms"] = &types.AttributeValueMemberN{Value: "2209172645679"}
	want["updated_at"] = &types.AttributeValueMemberN{Value: "2209086245678"}
	want["unknown_since_ms"] = &types.AttributeValueMemberN{Value: "2209086245678"} // went UNKNOWN now
	if diff := cmp.Diff(want, out.Item, ignoreAV); diff != "" {
		t.Errorf("stored item mismatch (-want +got):\n%s", diff)
	}
}

// conflicting makes the first n writes fail as DynamoDB fails a write that a
// concurrent transaction holds, then lets writes through to the real client.
type conflicting struct {
	dynamo.Client
	n     int
	calls atomic.Int32
}

func (c *conflicting) fail() error {
	if int(c.calls.Add(1)) > c.n {
		return nil
	}
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "write", Err: &types.TransactionConflictException{
		Message: aws.String("Transaction is ongoing for the item"),
	}}
}

func (c *conflicting) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if int(c.calls.Add(1)) <= c.n {
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[len(reasons)-1].Code = aws.String("TransactionConflict")
		return nil, &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "TransactWriteItems",
			Err: &types.TransactionCanceledException{CancellationReasons: reasons}}
	}
	return c.Client.TransactWriteItems(ctx, in, opts...)
}

func (c *conflicting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := c.fail(); err != nil {
		return nil, err
	}
	return c.Client.PutItem(ctx, in, opts...)
}

func (c *conflicting) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := c.fail(); err != nil {
		return nil, err
	}
	return c.Client.DeleteItem(ctx, in, opts...)
}

func (c *conflicting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := c.fail(); err != nil {
		return nil, err
	}
	return c.Client.UpdateItem(ctx, in, opts...)
}

// TestConflictRetry checks that a write cancelled by a concurrent transaction
// is attempted again, a bounded number of times.
func TestConflictRetry(t *testing.T) {
	real, client, names := newStore(t)
	t0 := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	ops := []struct {
		name  string
		setup func(t *testing.T, s *dynamo.Store, k idempotency.Key)
		call  func(ctx context.Context, s *dynamo.Store, k idempotency.Key, payments string) error
	}{
		{"Commit", nil, func(ctx context.Context, s *dynamo.Store, k idempotency.Key, payments string) error {
			e := dynamo.Insert(payments, "pk", map[string]string{"pk": k.Hash})
			return s.Commit(ctx, completedRecord(k, "", t0), []idempotency.Effect{e}, t0.Add(-time.Hour))
		}},
		{"Reserve", nil, func(ctx context.Context, s *dynamo.Store, k idempotency.Key, _ string) error {
			return s.Reserve(ctx, reservedRecord(k, "lease", t0), nil, t0.Add(-time.Hour))
		}},
		{"Complete", reserve, func(ctx context.Context, s *dynamo.Store, k idempotency.Key, _ string) error {
			return s.Complete(ctx, completedRecord(k, "lease", t0), "lease", nil)
		}},
		{"CompleteEffects", reserve, func(ctx context.Context, s *dynamo.Store, k idempotency.Key, payments string) error {
			e := dynamo.Insert(payments, "pk", map[string]string{"pk": k.Hash})
			return s.Complete(ctx, completedRecord(k, "lease", t0), "lease", []idempotency.Effect{e})
		}},
		{"Release", reserve, func(ctx context.Context, s *dynamo.Store, k idempotency.Key, _ string) error {
			return s.Release(ctx, k, "lease", nil)
		}},
		{"MarkUnknown", reserve, func(ctx context.Context, s *dynamo.Store, k idempotency.Key, _ string) error {
			return s.MarkUnknown(ctx, k, "lease", "lease-2", t0, t0.Add(-time.Hour))
		}},
	}
	for _, op := range ops {
		for _, tt := range []struct {
			failures        int
			wantCalls       int32
			wantUnavailable bool
		}{
			{failures: 2, wantCalls: 3},
			{failures: 100, wantCalls: 4, wantUnavailable: true},
		} {
			t.Run(fmt.Sprintf("%s/%d failures", op.name, tt.failures), func(t *testing.T) {
				k := idempotency.NewKey("acme", t.Name())
				if op.setup != nil {
					op.setup(t, real, k)
				}
				c := &conflicting{Client: client, n: tt.failures}
				s := dynamo.New(c, names.ByLogicalID["IdempotencyTable"], dynamo.WithConflictRetry(4, time.Millisecond, 2*time.Millisecond))
				err := op.call(t.Context(), s, k, names.ByLogicalID["PaymentsTable"])
				if got := c.calls.Load(); got != tt.wantCalls {
					t.Errorf("%s made %d calls, want %d", op.name, got, tt.wantCalls)
				}
				if tt.wantUnavailable {
					if !errors.Is(err, idempotency.ErrUnavailable) {
						t.Errorf("%s = %v, want ErrUnavailable", op.name, err)
					}
					return
				}
				if err != nil {
					t.Errorf("%s = %v, want nil", op.name, err)
				}
			})
		}
	}
}

func TestConflictRetryHonoursContext(t *testing.T) {
	_, client, names := newStore(t)
	c := &conflicting{Client: client, n: 100}
	s := dynamo.New(c, names.ByLogicalID["IdempotencyTable"], dynamo.WithConflictRetry(5, time.Hour, time.Hour))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Reserve(ctx, reservedRecord(idempotency.NewKey("acme", "k"), "lease", time.Now().Add(time.Minute)), nil, time.Now())
	if !errors.Is(err, idempotency.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reserve = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Reserve took %v, want it to stop when the context ends", d)
	}
}

func reserve(t *testing.T, s *dynamo.Store, k idempotency.Key) {
	t.Helper()
	if err := s.Reserve(t.Context(), reservedRecord(k, "lease", time.Now().Add(time.Hour)), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func completedRecord(k idempotency.Key, lease string, expires time.Time) idempotency.Record {
	return idempotency.Record{
		Key: k, Status: idempotency.StatusCompleted, Route: "POST /v1/payments", Fingerprint: "f", LeaseToken: lease,
		ExpiresAt: expires, Response: &idempotency.Response{Status: 201, Body: []byte(`{}`)},
		CreatedAt: expires.Add(-time.Hour), UpdatedAt: expires.Add(-time.Hour),
	}
}

func reservedRecord(k idempotency.Key, lease string, expires time.Time) idempotency.Record {
	return idempotency.Record{
		Key: k, Status: idempotency.StatusInProgress, Route: "POST /v1/charges", Fingerprint: "f", LeaseToken: lease,
		ExpiresAt: expires, CreatedAt: expires.Add(-time.Minute), UpdatedAt: expires.Add(-time.Minute),
	}
}

// storeOps calls every Store method.
var storeOps = []struct {
	name string
	call func(ctx context.Context, s *dynamo.Store) error
}{
	{"Commit", func(ctx context.Context, s *dynamo.Store) error {
		return s.Commit(ctx, completedRecord(idempotency.NewKey("acme", "k"), "", time.Now().Add(time.Hour)), nil, time.Now())
	}},
	{"Reserve", func(ctx context.Context, s *dynamo.Store) error {
		return s.Reserve(ctx, reservedRecord(idempotency.NewKey("acme", "k"), "lease", time.Now().Add(time.Hour)), nil, time.Now())
	}},
	{"Complete", func(ctx context.Context, s *dynamo.Store) error {
		return s.Complete(ctx, completedRecord(idempotency.NewKey("acme", "k"), "lease", time.Now().Add(time.Hour)), "lease", nil)
	}},
	{"Release", func(ctx context.Context, s *dynamo.Store) error {
		return s.Release(ctx, idempotency.NewKey("acme", "k"), "lease", nil)
	}},
	{"MarkUnknown", func(ctx context.Context, s *dynamo.Store) error {
		return s.MarkUnknown(ctx, idempotency.NewKey("acme", "k"), "lease", "lease-2", time.Now().Add(time.Hour), time.Now())
	}},
	{"Get", func(ctx context.Context, s *dynamo.Store) error {
		_, err := s.Get(ctx, idempotency.NewKey("acme", "k"))
		return err
	}},
}

// unreachable returns a Store whose endpoint is a closed local port, with the
// SDK retries every function uses. Nothing may rely on how long its calls
// take: the port may be taken again meanwhile.
func unreachable(t *testing.T) *dynamo.Store {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()
	cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return dynamo.New(dynamoclient.New(cfg, endpoint), "once-idempotency")
}

// failing are the ways DynamoDB can fail every attempt of a call: a local
// server answers (or does not) as each says, after counting the request.
var failing = []struct {
	name   string
	answer func(w http.ResponseWriter, r *http.Request)
}{
	{"no answer", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // until the client's attempt times out
	}},
	{"connection reset", func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}},
	{"500", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}`)
	}},
	{"throttled", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`)
	}},
}

// TestUnreachable checks that a store whose every attempt fails answers
// ErrUnavailable once the SDK has made exactly the attempts the functions'
// client allows (dynamoclient.DefaultMaxAttempts), never more: with the
// bounds on each attempt and on the backoff (dynamoclient's
// TestRetryBounds), a call ends within dynamoclient.CallBound. The calls of
// one way of failing run at once, each on a server of its own.
func TestUnreachable(t *testing.T) {
	for _, f := range failing {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			var wg sync.WaitGroup
			for _, op := range storeOps {
				var attempts atomic.Int32
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					attempts.Add(1)
					// Read the request whole, as DynamoDB does: the server
					// then notices the client hanging up.
					if _, err := io.Copy(io.Discard, r.Body); err != nil {
						return
					}
					f.answer(w, r)
				}))
				t.Cleanup(srv.Close)
				cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: srv.URL})
				if err != nil {
					t.Fatal(err)
				}
				s := dynamo.New(dynamoclient.New(cfg, srv.URL), "once-idempotency")
				wg.Go(func() {
					// Only so that a call the bounds fail to end cannot hang the
					// test: it then fails, its attempts cut short.
					ctx, cancel := context.WithTimeout(t.Context(), 4*dynamoclient.CallBound(dynamoclient.Options{}))
					defer cancel()
					if err := op.call(ctx, s); !errors.Is(err, idempotency.ErrUnavailable) {
						t.Errorf("%s = %v, want ErrUnavailable", op.name, err)
					}
					if got, want := int(attempts.Load()), dynamoclient.DefaultMaxAttempts; got != want {
						t.Errorf("%s made %d attempts, want %d", op.name, got, want)
					}
				})
			}
			wg.Wait()
		})
	}
}

func TestContextCanceled(t *testing.T) {
	s := unreachable(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, op := range storeOps {
		t.Run(op.name, func(t *testing.T) {
			if err := op.call(ctx, s); !errors.Is(err, idempotency.ErrUnavailable) || !errors.Is(err, context.Canceled) {
				t.Errorf("%s = %v, want ErrUnavailable and context.Canceled", op.name, err)
			}
		})
	}
}

// TestMissingTable checks that a misconfiguration is not reported as the
// store being unavailable (which would tell clients to retry).
func TestMissingTable(t *testing.T) {
	client := dynamotest.Client(t)
	s := dynamo.New(client, "once-no-such-table")
	for _, op := range storeOps {
		t.Run(op.name, func(t *testing.T) {
			err := op.call(t.Context(), s)
			var conflict *idempotency.ConflictError
			var notFound *types.ResourceNotFoundException
			if !errors.As(err, &notFound) || errors.Is(err, idempotency.ErrUnavailable) || errors.As(err, &conflict) {
				t.Errorf("%s = %v, want a ResourceNotFoundException that is neither unavailable nor a conflict", op.name, err)
			}
		})
	}
}

// TestEffectKey checks that an effect whose item lacks its key, or has it of
// the wrong type, or cannot be marshalled, fails the write, and nothing is
// written.
func TestEffectKey(t *testing.T) {
	s, _, names := newStore(t)
	k := idempotency.NewKey("acme", "k")
	for _, item := range []any{
		map[string]string{"id": "pay_1"},
		map[string]int{"pk": 1},
		make(chan int),
	} {
		e := dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", item)
		err := s.Commit(t.Context(), completedRecord(k, "", time.Now().Add(time.Hour)), []idempotency.Effect{e}, time.Now())
		if err == nil || errors.Is(err, idempotency.ErrUnavailable) {
			t.Errorf("Commit with effect item %v = %v, want an error", item, err)
		}
	}
	if _, err := s.Get(t.Context(), k); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("Get = %v, want ErrNotFound", err)
	}
}

// TestLargeAnswerItems checks how the store keeps large answers: compressed
// in the record's item when that is enough, in chunk items beside it
// otherwise, and refused, writing nothing, past MaxStoredBody.
func TestLargeAnswerItems(t *testing.T) {
	store, client, names := newStore(t)
	ctx := t.Context()
	now := time.Now()
	random := func(n int) []byte {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name       string
		body       []byte
		wantGzip   bool
		wantChunks int
	}{
		{"small", []byte(`{"ok":true}`), false, 0},
		{"compressible 1 MB", bytes.Repeat([]byte(`{"id":"pay_0123456789","amount":1999},`), 1<<20/37), true, 0},
		{"incompressible 1 MB", random(1 << 20), false, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := idempotency.NewKey("acme", tt.name)
			rec := completedRecord(k, "", now.Add(time.Hour))
			rec.Response.Body = tt.body
			if err := store.Commit(ctx, rec, nil, now); err != nil {
				t.Fatalf("Commit = %v", err)
			}
			item := dynamotest.Item(t, client, names.ByLogicalID["IdempotencyTable"], k.ID())
			_, gz := item[dynamo.AttrResponseEncoding]
			chunks := 0
			if v, ok := item[dynamo.AttrResponseChunks].(*types.AttributeValueMemberN); ok {
				chunks, _ = strconv.Atoi(v.Value)
			}
			if gz != tt.wantGzip || chunks != tt.wantChunks {
				t.Errorf("item: gzip %v, %d chunks; want %v, %d", gz, chunks, tt.wantGzip, tt.wantChunks)
			}
			// The chunk items retire with their record: its TTL, both forms.
			stored := chunkItems(t, client, names.ByLogicalID["IdempotencyTable"], k)
			if len(stored) != tt.wantChunks {
				t.Errorf("%d chunk items in the table, want %d", len(stored), tt.wantChunks)
			}
			for _, c := range stored {
				for _, attr := range []string{dynamo.AttrExpiresAt, dynamo.AttrExpiresAtMS} {
					want, got := attrText(item[attr]), attrText(c[attr])
					if want == "" || got != want {
						t.Errorf("chunk %v: %s = %q, want the record's %q", attrText(c[dynamo.AttrPK]), attr, got, want)
					}
				}
			}
			got, err := store.Get(ctx, k)
			if err != nil || !bytes.Equal(got.Response.Body, tt.body) {
				t.Errorf("Get() body %d bytes, %v; want the %d bytes stored", len(got.Response.Body), err, len(tt.body))
			}
		})
	}
	t.Run("too large", func(t *testing.T) {
		k := idempotency.NewKey("acme", "too large")
		rec := completedRecord(k, "", now.Add(time.Hour))
		rec.Response.Body = random(dynamo.MaxStoredBody + 1)
		if err := store.Commit(ctx, rec, nil, now); !errors.Is(err, dynamo.ErrTooLarge) {
			t.Fatalf("Commit(%d bytes) = %v, want ErrTooLarge", len(rec.Response.Body), err)
		}
		if _, err := store.Get(ctx, k); !errors.Is(err, idempotency.ErrNotFound) {
			t.Errorf("Get() = %v, want ErrNotFound", err)
		}
	})
}

// chunkItems returns the items of table beside k's record: those whose key
// starts with the record's and is not it.
func chunkItems(t *testing.T, client *dynamodb.Client, table string, k idempotency.Key) []map[string]types.AttributeValue {
	t.Helper()
	var items []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String("begins_with(#pk, :pk) AND #pk <> :record"),
		ExpressionAttributeNames:  map[string]string{"#pk": dynamo.AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: k.ID()}, ":record": &types.AttributeValueMemberS{Value: k.ID()}},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatalf("Scan(%s): %v", table, err)
		}
		items = append(items, out.Items...)
	}
	return items
}

// attrText is the text of a number or string attribute, "" for anything else.
func attrText(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberS:
		return v.Value
	}
	return ""
}

// TestLargeAnswersThroughMiddleware: a 1 MB answer of an Atomic route is
// stored and replayed byte for byte through DynamoDB; one too large to store
// answers 500 response_too_large, commits nothing, and leaves no record.
func TestLargeAnswersThroughMiddleware(t *testing.T) {
	store, client, names := newStore(t)
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Atomic("POST /v1/exports", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var size int
		fmt.Sscanf(r.URL.Query().Get("size"), "%d", &size)
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		call.AddEffect(dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", map[string]string{"pk": call.Key().ID()}))
		body := make([]byte, size)
		if _, err := rand.Read(body); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}))
	send := func(key string, size int) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", fmt.Sprintf("/v1/exports?size=%d", size), strings.NewReader(`{}`))
		r.Header.Set(idempotency.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	first := send("one-mb", 1<<20)
	again := send("one-mb", 1<<20)
	if first.Code != http.StatusCreated || first.Body.Len() != 1<<20 {
		t.Fatalf("first = %d with %d bytes, want 201 with 1 MiB", first.Code, first.Body.Len())
	}
	if again.Code != http.StatusCreated || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) || again.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Errorf("retry = %d with %d bytes (replayed %q), want the 1 MiB answer replayed byte for byte", again.Code, again.Body.Len(), again.Header().Get(idempotency.ReplayedHeader))
	}
	huge := send("huge", dynamo.MaxStoredBody+1)
	if huge.Code != http.StatusInternalServerError || !strings.Contains(huge.Body.String(), `"code":"response_too_large"`) {
		t.Errorf("too large = %d %.200s, want 500 response_too_large", huge.Code, huge.Body)
	}
	if _, err := store.Get(t.Context(), idempotency.NewKey("acme", "huge")); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("record of the too-large answer: %v, want none", err)
	}
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName: aws.String(names.ByLogicalID["PaymentsTable"]), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: idempotency.NewKey("acme", "huge").ID()}},
	})
	if err != nil || len(out.Item) != 0 {
		t.Errorf("the too-large answer's effect: %v, %v; want none written", out.Item, err)
	}
}

// Store implements the engine's interface; the check lives here, not in the
// package, so that a function whose code never uses a Store does not count
// as reaching its methods (internal/deploytest's IAM scan).
var _ idempotency.Store = (*dynamo.Store)(nil)
