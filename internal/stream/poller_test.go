package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubstream "github.com/oncehq/once/idempotency/stream"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// env is one test's DynamoDB Local clients and tables.
type env struct {
	db      *dynamodb.Client
	streams *dynamodbstreams.Client
	names   dynamotest.Names
}

func newEnv(t *testing.T) env {
	t.Helper()
	db := dynamotest.Client(t)
	return env{db: db, streams: dynamotest.Streams(t), names: dynamotest.Tables(t, db)}
}

// opts returns poller options for table with fast retries, logging to t.
func (e env) opts(t *testing.T, table string, h Handler) PollerOptions {
	return PollerOptions{
		Client:       e.streams,
		DB:           e.db,
		Table:        table,
		Name:         "test",
		Handler:      h,
		PollInterval: 50 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond,
		Logger:       testLogger(t),
	}
}

// start runs a Poller until the end of the test, and then checks that Run
// returns promptly.
func start(t *testing.T, opts PollerOptions) {
	t.Helper()
	p, err := NewPoller(opts)
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, p)
}

func (e env) put(t *testing.T, table, pk string, attrs map[string]types.AttributeValue) {
	t.Helper()
	item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
	for k, v := range attrs {
		item[k] = v
	}
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem(%s): %v", pk, err)
	}
}

func (e env) streamARN(t *testing.T, table string) string {
	t.Helper()
	out, err := e.db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.Table.LatestStreamArn)
}

// log is a goroutine-safe list of what the handlers saw.
type list[T any] struct {
	mu   sync.Mutex
	list []T
}

func (l *list[T]) add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, v)
}

func (l *list[T]) get() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.list...)
}

func pkOf(rec events.DynamoDBEventRecord) string {
	if v, ok := rec.Change.Keys["pk"]; ok {
		return v.String()
	}
	return ""
}

func seqLess(a, b string) bool {
	x, ok1 := new(big.Int).SetString(a, 10)
	y, ok2 := new(big.Int).SetString(b, 10)
	return ok1 && ok2 && x.Cmp(y) < 0
}

func TestPollerDeliversChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	var got list[events.DynamoDBEventRecord]
	start(t, e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			got.add(r)
		}
		return events.DynamoDBEventResponse{}, nil
	}))

	before := time.Now()
	e.put(t, table, "acme#p1", map[string]types.AttributeValue{
		"amount":   &types.AttributeValueMemberN{Value: "100"},
		"status":   &types.AttributeValueMemberS{Value: "pending"},
		"metadata": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"order": &types.AttributeValueMemberS{Value: "42"}}},
	})
	_, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "acme#p1"}},
		UpdateExpression:          aws.String("SET #s = :s"),
		ExpressionAttributeNames:  map[string]string{"#s": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "succeeded"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dynamotest.Delete(t, e.db, table, "acme#p1")
	lambdatest.WaitFor(t, 10*time.Second, "three records", func() bool { return len(got.get()) >= 3 })

	recs := got.get()
	if len(recs) != 3 {
		t.Fatalf("got %d records, want 3", len(recs))
	}
	arn := e.streamARN(t, table)
	type payment struct {
		PK       string            `dynamodbav:"pk"`
		Amount   int               `dynamodbav:"amount"`
		Status   string            `dynamodbav:"status"`
		Metadata map[string]string `dynamodbav:"metadata"`
	}
	pending := &payment{PK: "acme#p1", Amount: 100, Status: "pending", Metadata: map[string]string{"order": "42"}}
	succeeded := &payment{PK: "acme#p1", Amount: 100, Status: "succeeded", Metadata: map[string]string{"order": "42"}}
	wants := []struct {
		name     string
		old, new *payment
	}{
		{"INSERT", nil, pending},
		{"MODIFY", pending, succeeded},
		{"REMOVE", succeeded, nil},
	}
	for i, want := range wants {
		r := recs[i]
		c := pubstream.NewChange(r)
		if r.EventName != want.name || r.EventSource != "aws:dynamodb" || r.EventVersion != "1.1" ||
			r.EventSourceArn != arn || r.AWSRegion == "" || r.EventID == "" {
			t.Errorf("record %d = {eventName %q, eventSource %q, eventVersion %q, eventSourceARN %q, awsRegion %q, eventID %q}, want %s from %s",
				i, r.EventName, r.EventSource, r.EventVersion, r.EventSourceArn, r.AWSRegion, r.EventID, want.name, arn)
		}
		d := r.Change
		if d.StreamViewType != "NEW_AND_OLD_IMAGES" || d.SizeBytes <= 0 || pkOf(r) != "acme#p1" || len(d.Keys) != 1 {
			t.Errorf("record %d dynamodb = {StreamViewType %q, SizeBytes %d, Keys %v}, want NEW_AND_OLD_IMAGES, > 0, pk acme#p1",
				i, d.StreamViewType, d.SizeBytes, d.Keys)
		}
		// DynamoDB Local rounds the creation time down to the minute.
		if at := d.ApproximateCreationDateTime.Time; at.Before(before.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Errorf("record %d ApproximateCreationDateTime = %v, want about %v", i, at, before)
		}
		if i > 0 && !seqLess(recs[i-1].Change.SequenceNumber, d.SequenceNumber) {
			t.Errorf("sequence numbers %s then %s, want increasing", recs[i-1].Change.SequenceNumber, d.SequenceNumber)
		}
		if c.ByTTL() || r.UserIdentity != nil {
			t.Errorf("record %d userIdentity = %+v, want none for a client's write", i, r.UserIdentity)
		}
		for _, img := range []struct {
			which  string
			want   *payment
			decode func(any) error
		}{{"old", want.old, c.DecodeOld}, {"new", want.new, c.DecodeNew}} {
			var p payment
			err := img.decode(&p)
			switch {
			case img.want == nil && !errors.Is(err, pubstream.ErrNoImage):
				t.Errorf("%s: decode %s image = %v, want ErrNoImage", want.name, img.which, err)
			case img.want != nil && err != nil:
				t.Errorf("%s: decode %s image: %v", want.name, img.which, err)
			case img.want != nil:
				if diff := cmp.Diff(*img.want, p); diff != "" {
					t.Errorf("%s: %s image (-want +got):\n%s", want.name, img.which, diff)
				}
			}
		}
	}
}

// call is one application of a record by a Process function.
type call struct {
	PK string
	OK bool
}

func TestPollerRedeliversFailedRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	for _, pk := range []string{"a", "b", "c"} {
		e.put(t, table, pk, nil)
	}
	var (
		calls    list[call]
		failures atomic.Int32
		dead     list[Failure]
	)
	opts := e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return pubstream.Process(ctx, ev, func(ctx context.Context, rec events.DynamoDBEventRecord) error {
			pk := pkOf(rec)
			if pk == "b" && failures.Add(1) <= 2 {
				calls.add(call{pk, false})
				return errors.New("transient")
			}
			calls.add(call{pk, true})
			return nil
		}), nil
	})
	opts.BisectOnError = true
	opts.DeadLetter = func(_ context.Context, f Failure) { dead.add(f) }
	start(t, opts)

	lambdatest.WaitFor(t, 10*time.Second, "record c", func() bool {
		c := calls.get()
		return len(c) > 0 && c[len(c)-1].PK == "c"
	})
	time.Sleep(100 * time.Millisecond) // nothing more should come
	want := []call{{"a", true}, {"b", false}, {"b", false}, {"b", true}, {"c", true}}
	if diff := cmp.Diff(want, calls.get()); diff != "" {
		t.Errorf("applications (-want +got):\n%s", diff)
	}
	if d := dead.get(); len(d) != 0 {
		t.Errorf("dead letters = %+v, want none", d)
	}
}

func TestPollerDeadLettersPoisonRecord(t *testing.T) {
	t.Parallel()
	perRecord := func(calls *list[call]) Handler {
		return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			return pubstream.Process(ctx, ev, func(ctx context.Context, rec events.DynamoDBEventRecord) error {
				pk := pkOf(rec)
				calls.add(call{pk, pk != "poison"})
				if pk == "poison" {
					return errors.New("poison")
				}
				return nil
			}), nil
		}
	}
	wholeBatch := func(calls *list[call]) Handler {
		return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			for _, r := range ev.Records {
				if pkOf(r) == "poison" {
					calls.add(call{"poison", false})
					return events.DynamoDBEventResponse{}, errors.New("poison in batch")
				}
			}
			for _, r := range ev.Records {
				calls.add(call{pkOf(r), true})
			}
			return events.DynamoDBEventResponse{}, nil
		}
	}
	panicking := func(calls *list[call]) Handler {
		return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			for _, r := range ev.Records {
				if pkOf(r) == "poison" {
					calls.add(call{"poison", false})
					panic("poison")
				}
			}
			for _, r := range ev.Records {
				calls.add(call{pkOf(r), true})
			}
			return events.DynamoDBEventResponse{}, nil
		}
	}
	tests := []struct {
		name       string
		handler    func(*list[call]) Handler
		bisect     bool
		wantDead   []string
		wantReason string
		wantOK     []string // records applied, in order, before "later"
		// wantFailed counts failed invocations: 1 + MaxRetryAttempts (2),
		// plus the bisections that isolate the poison record.
		wantFailed int
	}{
		{"batch item failure, bisect", perRecord, true, []string{"poison"}, "batch item failure", []string{"a", "b", "d", "e"}, 3},
		{"batch item failure, no bisect", perRecord, false, []string{"poison", "d", "e"}, "batch item failure", []string{"a", "b"}, 3},
		// [a b poison d e] -> [a b poison] [d e] -> [a b] [poison] [d e].
		{"handler error, bisect", wholeBatch, true, []string{"poison"}, "handler error: poison in batch", []string{"a", "b", "d", "e"}, 2 + 3},
		{"handler error, no bisect", wholeBatch, false, []string{"a", "b", "poison", "d", "e"}, "handler error: poison in batch", nil, 3},
		{"handler panic, bisect", panicking, true, []string{"poison"}, "handler error: handler panicked: poison", []string{"a", "b", "d", "e"}, 2 + 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			table := e.names.ByLogicalID["PaymentsTable"]
			for _, pk := range []string{"a", "b", "poison", "d", "e"} {
				e.put(t, table, pk, nil)
			}
			var (
				calls list[call]
				dead  list[Failure]
			)
			file := filepath.Join(t.TempDir(), ".devstack", "dlq-test.jsonl")
			opts := e.opts(t, table, tt.handler(&calls))
			opts.BisectOnError = tt.bisect
			opts.MaxRetryAttempts = 2
			opts.DeadLetter = func(_ context.Context, f Failure) { dead.add(f) }
			opts.DeadLetterFile = file
			start(t, opts)

			lambdatest.WaitFor(t, 15*time.Second, "dead letters", func() bool { return len(dead.get()) >= len(tt.wantDead) })
			e.put(t, table, "later", nil)
			lambdatest.WaitFor(t, 10*time.Second, "the record after the poison", func() bool {
				c := calls.get()
				return len(c) > 0 && c[len(c)-1].PK == "later"
			})

			var gotDead []string
			for _, f := range dead.get() {
				gotDead = append(gotDead, pkOf(f.Record))
				if f.Attempts != 3 || f.Reason != tt.wantReason || f.Poller != "test" || f.Table != table || f.ShardID == "" || f.StreamARN == "" {
					t.Errorf("Failure = {Attempts %d, Reason %q, Poller %q, Table %q, ShardID %q, StreamARN %q}, want 3 attempts, reason %q",
						f.Attempts, f.Reason, f.Poller, f.Table, f.ShardID, f.StreamARN, tt.wantReason)
				}
			}
			if diff := cmp.Diff(tt.wantDead, gotDead); diff != "" {
				t.Errorf("dead-lettered records (-want +got):\n%s", diff)
			}
			fromFile, err := ReadDeadLetters(file)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(dead.get(), fromFile, cmp.Comparer(func(a, b events.DynamoDBEventRecord) bool {
				x, err1 := json.Marshal(a)
				y, err2 := json.Marshal(b)
				return err1 == nil && err2 == nil && string(x) == string(y)
			})); diff != "" {
				t.Errorf("dead-letter file (-callback +file):\n%s", diff)
			}

			var ok []string
			poisonCalls := 0
			for _, c := range calls.get() {
				switch {
				case !c.OK:
					poisonCalls++
				case c.PK != "later":
					ok = append(ok, c.PK)
				}
			}
			if diff := cmp.Diff(tt.wantOK, ok); diff != "" {
				t.Errorf("records applied (-want +got):\n%s", diff)
			}
			if poisonCalls != tt.wantFailed {
				t.Errorf("poison record failed %d times, want %d", poisonCalls, tt.wantFailed)
			}
		})
	}
}

func TestPollerTTLRemoval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := e.names.ByLogicalID["IdempotencyTable"]
	ttl, err := e.db.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		_, err := e.db.UpdateTimeToLive(t.Context(), &dynamodb.UpdateTimeToLiveInput{
			TableName:               aws.String(table),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("expires_at"), Enabled: aws.Bool(true)},
		})
		if err != nil {
			t.Fatalf("enable TTL: %v", err)
		}
	}

	removals := make(chan pubstream.Change, 10)
	start(t, e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return pubstream.Process(ctx, ev, func(ctx context.Context, rec events.DynamoDBEventRecord) error {
			if c := pubstream.NewChange(rec); c.EventName == events.DynamoDBOperationTypeRemove {
				select {
				case removals <- c:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}), nil
	}))

	expired := strconv.FormatInt(time.Now().Add(-5*time.Second).Unix(), 10)
	e.put(t, table, "acme#deleted", map[string]types.AttributeValue{"expires_at": &types.AttributeValueMemberN{Value: "4102444800"}})
	dynamotest.Delete(t, e.db, table, "acme#deleted")
	put := time.Now()
	e.put(t, table, "acme#expired", map[string]types.AttributeValue{
		"status":     &types.AttributeValueMemberS{Value: "COMPLETED"},
		"expires_at": &types.AttributeValueMemberN{Value: expired},
	})

	timeout := time.After(30 * time.Second)
	for seen := map[string]bool{}; !seen["acme#expired"]; {
		select {
		case c := <-removals:
			pk := c.Keys["pk"].String()
			seen[pk] = true
			switch pk {
			case "acme#deleted":
				if c.ByTTL() {
					t.Errorf("client DeleteItem: ByTTL() = true, userIdentity %+v", c.UserIdentity)
				}
			case "acme#expired":
				t.Logf("TTL REMOVE delivered %v after the put; userIdentity %+v", time.Since(put).Round(time.Millisecond), c.UserIdentity)
				if !c.ByTTL() {
					t.Errorf("TTL removal: ByTTL() = false, userIdentity %+v", c.UserIdentity)
				}
				var old struct {
					Status    string `dynamodbav:"status"`
					ExpiresAt int64  `dynamodbav:"expires_at"`
				}
				if err := c.DecodeOld(&old); err != nil || old.Status != "COMPLETED" || strconv.FormatInt(old.ExpiresAt, 10) != expired {
					t.Errorf("TTL removal old image = %+v, %v; want status COMPLETED, expires_at %s", old, err, expired)
				}
			}
		case <-timeout:
			t.Fatal("no TTL REMOVE within 30s of putting an expired item")
		}
	}
}

// spyStreams wraps the real Streams client to count calls and to inject
// expired shard iterators and trimmed-data answers.
type spyStreams struct {
	StreamsAPI
	expireEvery atomic.Int32 // while n > 0, every n-th GetRecords fails with ExpiredIteratorException
	trim        atomic.Bool  // while set, GetRecords fails with TrimmedDataAccessException
	getRecords  atomic.Int32
	iterators   atomic.Int32
	expired     atomic.Int32
	firstRead   chan struct{}
	once        sync.Once
}

func (s *spyStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	s.iterators.Add(1)
	return s.StreamsAPI.GetShardIterator(ctx, in, optFns...)
}

func (s *spyStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	n := s.getRecords.Add(1)
	if every := s.expireEvery.Load(); every > 0 && n%every == 0 {
		s.expired.Add(1)
		return nil, &streamtypes.ExpiredIteratorException{Message: aws.String("injected")}
	}
	if s.trim.Load() {
		return nil, &streamtypes.TrimmedDataAccessException{Message: aws.String("injected")}
	}
	out, err := s.StreamsAPI.GetRecords(ctx, in, optFns...)
	if s.firstRead != nil {
		s.once.Do(func() { close(s.firstRead) })
	}
	return out, err
}

// collect runs a poller of table reading through client (batches of
// batchSize, 0 for the default) until the end of the test, and returns the
// pks of the records it delivers, in order.
func (e env) collect(t *testing.T, table string, client StreamsAPI, batchSize int) *list[string] {
	t.Helper()
	var seen list[string]
	opts := e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			seen.add(pkOf(r))
		}
		return events.DynamoDBEventResponse{}, nil
	})
	opts.Client = client
	opts.BatchSize = batchSize
	start(t, opts)
	return &seen
}

func TestPollerExpiredIterator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	spy := &spyStreams{StreamsAPI: e.streams}
	spy.expireEvery.Store(3)
	seen := e.collect(t, table, spy, 2)

	var want []string
	for i := range 8 {
		pk := fmt.Sprintf("k%d", i)
		want = append(want, pk)
		e.put(t, table, pk, nil)
		time.Sleep(30 * time.Millisecond)
	}
	lambdatest.WaitFor(t, 10*time.Second, "every record", func() bool { return len(seen.get()) >= len(want) })
	time.Sleep(200 * time.Millisecond) // no duplicates should follow
	if diff := cmp.Diff(want, seen.get()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if spy.expired.Load() == 0 || spy.iterators.Load() < 2 {
		t.Errorf("injected %d expiries, %d iterators obtained; want the iterator re-obtained", spy.expired.Load(), spy.iterators.Load())
	}
}

// TestPollerStaleIteratorBackoff checks that a shard whose reads keep
// answering "trimmed" or "expired" is retried with a bounded backoff, not
// in a tight loop, and that its records are delivered once the reads
// succeed again.
func TestPollerStaleIteratorBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		inject func(*spyStreams, bool)
	}{
		{"trimmed", func(s *spyStreams, on bool) { s.trim.Store(on) }},
		{"expired", func(s *spyStreams, on bool) {
			every := int32(0) // off
			if on {
				every = 1 // every read
			}
			s.expireEvery.Store(every)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			table := e.names.ByLogicalID["PaymentsTable"]
			spy := &spyStreams{StreamsAPI: e.streams}
			tc.inject(spy, true)
			seen := e.collect(t, table, spy, 0)
			e.put(t, table, "k0", nil)

			// 1.5s of failed reads: retrying at once, DynamoDB Local
			// hands out hundreds of iterators; backing off from 10ms
			// (0, 10, 20, 40, ..., 320, 320) it is about 10.
			time.Sleep(1500 * time.Millisecond)
			if n := spy.iterators.Load(); n < 2 || n > 25 {
				t.Errorf("%d shard iterators in 1.5s of %s reads, want 2 to 25 (a bounded backoff)", n, tc.name)
			}
			tc.inject(spy, false)
			e.put(t, table, "k1", nil)
			lambdatest.WaitFor(t, 10*time.Second, "both records", func() bool { return len(seen.get()) >= 2 })
			time.Sleep(200 * time.Millisecond) // no duplicates should follow
			if diff := cmp.Diff([]string{"k0", "k1"}, seen.get()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPollerStartAtLatest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	e.put(t, table, "old", nil)
	spy := &spyStreams{StreamsAPI: e.streams, firstRead: make(chan struct{})}
	var seen list[string]
	opts := e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			seen.add(pkOf(r))
		}
		return events.DynamoDBEventResponse{}, nil
	})
	opts.Client = spy
	opts.StartAt = streamtypes.ShardIteratorTypeLatest
	start(t, opts)
	select {
	case <-spy.firstRead:
	case <-time.After(10 * time.Second):
		t.Fatal("the poller did not read the stream within 10s")
	}
	e.put(t, table, "new", nil)
	lambdatest.WaitFor(t, 10*time.Second, "the new record", func() bool { return len(seen.get()) > 0 })
	if diff := cmp.Diff([]string{"new"}, seen.get()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

func TestPollerRunErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noop := func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{}, nil
	}
	for name, table := range map[string]string{"no stream": e.names.ByLogicalID["ApiKeysTable"], "no table": e.names.ByLogicalID["ApiKeysTable"] + "-missing"} {
		t.Run(name, func(t *testing.T) {
			p, err := NewPoller(e.opts(t, table, noop))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := p.Run(ctx); err == nil || !strings.Contains(err.Error(), table) {
				t.Errorf("Run() = %v, want an error naming %s", err, table)
			}
		})
	}
}

func TestNewPoller(t *testing.T) {
	valid := func() PollerOptions {
		return PollerOptions{
			Client: &dynamodbstreams.Client{}, DB: &dynamodb.Client{}, Table: "t",
			Handler: func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				return events.DynamoDBEventResponse{}, nil
			},
		}
	}
	p, err := NewPoller(valid())
	if err != nil {
		t.Fatalf("NewPoller(valid) = %v", err)
	}
	o := p.opts
	if o.Name != "t" || o.BatchSize != 100 || o.PollInterval != 250*time.Millisecond || o.MaxRetryAttempts != 3 ||
		o.RetryBackoff != 100*time.Millisecond || o.StartAt != streamtypes.ShardIteratorTypeTrimHorizon || o.BisectOnError {
		t.Errorf("defaults = %+v", o)
	}
	tests := []struct {
		name   string
		change func(*PollerOptions)
	}{
		{"no client", func(o *PollerOptions) { o.Client = nil }},
		{"no db", func(o *PollerOptions) { o.DB = nil }},
		{"no table", func(o *PollerOptions) { o.Table = "" }},
		{"no handler", func(o *PollerOptions) { o.Handler = nil }},
		{"batch too large", func(o *PollerOptions) { o.BatchSize = 1001 }},
		{"negative batch", func(o *PollerOptions) { o.BatchSize = -1 }},
		{"retry forever", func(o *PollerOptions) { o.MaxRetryAttempts = -1 }},
		{"negative interval", func(o *PollerOptions) { o.PollInterval = -time.Second }},
		{"bad start", func(o *PollerOptions) { o.StartAt = streamtypes.ShardIteratorTypeAtSequenceNumber }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.change(&o)
			if _, err := NewPoller(o); err == nil {
				t.Errorf("NewPoller() succeeded, want an error")
			}
		})
	}
}

func TestBackoffBounded(t *testing.T) {
	p := &Poller{opts: PollerOptions{RetryBackoff: 10 * time.Millisecond}}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 320, 320}
	for i, w := range want {
		if got := p.backoff(i + 1); got != w*time.Millisecond {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := p.backoff(1 << 30); got != 320*time.Millisecond {
		t.Errorf("backoff(huge) = %v, want 320ms", got)
	}
}

func TestReadyShards(t *testing.T) {
	shard := func(id, parent string) streamtypes.Shard {
		s := streamtypes.Shard{ShardId: aws.String(id)}
		if parent != "" {
			s.ParentShardId = aws.String(parent)
		}
		return s
	}
	// a -> b -> c, a -> e (a split), x (parent trimmed) -> d.
	shards := []streamtypes.Shard{shard("a", ""), shard("b", "a"), shard("c", "b"), shard("d", "x"), shard("e", "a")}
	tests := []struct {
		name              string
		started, finished []string
		want              []string
	}{
		{"roots and orphans first", nil, nil, []string{"a", "d"}},
		{"children wait for a parent being read", []string{"a", "d"}, nil, nil},
		{"children of a finished parent", []string{"a", "d"}, []string{"a"}, []string{"b", "e"}},
		{"grandchild", []string{"a", "b", "d", "e"}, []string{"a", "b"}, []string{"c"}},
		{"a parent trimmed while being read still blocks", []string{"x"}, nil, []string{"a"}},
		{"everything started", []string{"a", "b", "c", "d", "e"}, []string{"a", "b"}, nil},
	}
	set := func(ids []string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, s := range readyShards(shards, set(tt.started), set(tt.finished)) {
				got = append(got, aws.ToString(s.ShardId))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("readyShards (-want +got):\n%s", diff)
			}
		})
	}
}

// testLogger logs to t, at debug level.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func TestPollerFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	var seen list[string]
	opts := e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			seen.add(r.EventName + " " + pkOf(r))
		}
		return events.DynamoDBEventResponse{}, nil
	})
	opts.Filter = func(rec events.DynamoDBEventRecord) bool {
		return rec.EventName == "INSERT" && strings.HasPrefix(pkOf(rec), "keep")
	}
	start(t, opts)
	for _, pk := range []string{"drop-1", "keep-1", "drop-2", "keep-2"} {
		e.put(t, table, pk, nil)
	}
	dynamotest.Delete(t, e.db, table, "keep-1")
	e.put(t, table, "last", nil)
	e.put(t, table, "keep-3", nil)
	lambdatest.WaitFor(t, 10*time.Second, "keep-3", func() bool { return len(seen.get()) >= 3 })
	if diff := cmp.Diff([]string{"INSERT keep-1", "INSERT keep-2", "INSERT keep-3"}, seen.get()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

// countingStreams counts GetRecords calls.
type countingStreams struct {
	StreamsAPI
	gets atomic.Int64
}

func (c *countingStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	c.gets.Add(1)
	return c.StreamsAPI.GetRecords(ctx, in, opts...)
}

// startBackingOff starts a poller of table that polls every 20ms and backs
// off up to 320ms, with filter, and returns its GetRecords count and the
// keys it delivers.
func startBackingOff(t *testing.T, e env, table string, filter func(events.DynamoDBEventRecord) bool) (*countingStreams, chan string) {
	t.Helper()
	counting := &countingStreams{StreamsAPI: e.streams}
	got := make(chan string, 10)
	opts := e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			got <- pkOf(r)
		}
		return events.DynamoDBEventResponse{}, nil
	})
	opts.Client = counting
	opts.PollInterval = 20 * time.Millisecond
	opts.MaxIdleInterval = 320 * time.Millisecond
	opts.Filter = filter
	start(t, opts)
	return counting, got
}

// TestPollerIdleBackoff checks that an idle poller reads its shard less and
// less often, up to MaxIdleInterval, and still delivers a new record
// promptly.
func TestPollerIdleBackoff(t *testing.T) {
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	counting, got := startBackingOff(t, e, table, nil)

	// 2s idle: at a steady 20ms that would be about 100 reads; backing off
	// (20, 40, 80, 160, 320, 320, ...) it is about 10.
	time.Sleep(2 * time.Second)
	if n := counting.gets.Load(); n > 30 {
		t.Errorf("%d GetRecords in 2s of idleness, want at most 30 (backing off to 320ms)", n)
	}
	e.put(t, table, "after-idle", nil)
	select {
	case pk := <-got:
		if pk != "after-idle" {
			t.Errorf("delivered %q, want after-idle", pk)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the record written after the idle period was not delivered within 10s")
	}
}

// TestPollerFilteredBackoff checks that a poller whose filter passes none
// of the records flowing through its shard backs off as an idle one does,
// and still delivers promptly the first record its filter passes.
func TestPollerFilteredBackoff(t *testing.T) {
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	counting, got := startBackingOff(t, e, table, func(rec events.DynamoDBEventRecord) bool {
		return strings.HasPrefix(pkOf(rec), "keep")
	})

	// 2s of records the filter drops, one every 20ms: a poller that took
	// them for work would read about 100 times, one backing off about 10.
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		e.put(t, table, fmt.Sprintf("drop-%d", i), nil)
		time.Sleep(20 * time.Millisecond)
	}
	if n := counting.gets.Load(); n > 30 {
		t.Errorf("%d GetRecords in 2s of filtered-out records, want at most 30 (backing off to 320ms)", n)
	}
	e.put(t, table, "keep-1", nil)
	select {
	case pk := <-got:
		if pk != "keep-1" {
			t.Errorf("delivered %q, want keep-1", pk)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the record the filter passes was not delivered within 10s")
	}
	select {
	case pk := <-got:
		t.Errorf("delivered %q as well; the filter passes only keep-1", pk)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestPollerReadsMoreThanABatch checks that the poller reads up to
// MaxBatchSize records a call and hands them over in batches of BatchSize,
// in order: records that arrived together cost one GetRecords, not one per
// batch.
func TestPollerReadsMoreThanABatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := e.names.ByLogicalID["PaymentsTable"]
	var want []string
	for i := range 25 {
		pk := fmt.Sprintf("k%02d", i)
		want = append(want, pk)
		e.put(t, table, pk, nil)
	}
	counting := &countingStreams{StreamsAPI: e.streams}
	var seen list[string]
	var sizes list[int]
	var readsAtLast atomic.Int64
	opts := e.opts(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		sizes.add(len(ev.Records))
		for _, r := range ev.Records {
			seen.add(pkOf(r))
		}
		readsAtLast.Store(counting.gets.Load())
		return events.DynamoDBEventResponse{}, nil
	})
	opts.Client = counting
	opts.BatchSize = 10
	start(t, opts)
	lambdatest.WaitFor(t, 10*time.Second, "every record", func() bool { return len(seen.get()) >= len(want) })
	if diff := cmp.Diff(want, seen.get()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	for _, n := range sizes.get() {
		if n > opts.BatchSize {
			t.Errorf("a batch of %d records, want at most %d", n, opts.BatchSize)
		}
	}
	if n, batches := readsAtLast.Load(), len(sizes.get()); n >= int64(batches) {
		t.Errorf("%d GetRecords for %d batches, want fewer reads than batches", n, batches)
	}
}
