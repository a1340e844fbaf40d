package reconciler_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/idempotency"
	"github.com/oncehq/once/internal/store/dynamo"
)

// env is one test's DynamoDB Local tables and idempotency store.
type env struct {
	db    *dynamodb.Client
	names dynamotest.Names
	store *dynamo.Store
}

func newEnv(t *testing.T) env {
	t.Helper()
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	return env{db: db, names: names, store: dynamo.New(db, names.Idempotency)}
}

// item reads the stored item of key as DynamoDB holds it.
func (e env) item(t *testing.T, key idempotency.Key) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.db.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(e.names.Idempotency),
		Key:            map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: key.ID()}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem(%s): %v", key.Short(), err)
	}
	if len(out.Item) == 0 {
		t.Fatalf("GetItem(%s): no item", key.Short())
	}
	return out.Item
}

// deleteItem deletes key's item unconditionally, as DynamoDB's TTL process
// does.
func (e env) deleteItem(t *testing.T, key idempotency.Key) {
	t.Helper()
	_, err := e.db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.names.Idempotency),
		Key:       map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: key.ID()}},
	})
	if err != nil {
		t.Fatalf("DeleteItem(%s): %v", key.Short(), err)
	}
}

// image converts a stored item to a stream image as Lambda delivers it.
func image(item map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	out := make(map[string]events.DynamoDBAttributeValue, len(item))
	for k, v := range item {
		out[k] = eventValue(v)
	}
	return out
}

func eventValue(v types.AttributeValue) events.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value)
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value)
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value)
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value)
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(image(v.Value))
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = eventValue(e)
		}
		return events.NewListAttribute(l)
	case *types.AttributeValueMemberNULL:
		return events.NewNullAttribute()
	}
	panic(fmt.Sprintf("unsupported attribute value %T", v))
}

var ttlIdentity = &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}

var seq atomic.Int64

// streamRecord is a stream record as Lambda delivers it: its creation time
// in whole seconds, a fresh sequence number.
func streamRecord(name events.DynamoDBOperationType, old, new map[string]events.DynamoDBAttributeValue, who *events.DynamoDBUserIdentity, at time.Time) events.DynamoDBEventRecord {
	n := seq.Add(1)
	img := new
	if img == nil {
		img = old
	}
	return events.DynamoDBEventRecord{
		AWSRegion:      "us-east-1",
		EventID:        fmt.Sprintf("event-%d", n),
		EventName:      string(name),
		EventSource:    "aws:dynamodb",
		EventVersion:   "1.1",
		EventSourceArn: "arn:aws:dynamodb:us-east-1:123456789012:table/once-idempotency/stream/2026-01-01T00:00:00.000",
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: at.Truncate(time.Second)},
			Keys:                        map[string]events.DynamoDBAttributeValue{dynamo.AttrPK: img[dynamo.AttrPK]},
			OldImage:                    old,
			NewImage:                    new,
			SequenceNumber:              fmt.Sprintf("%021d", n),
			StreamViewType:              "NEW_AND_OLD_IMAGES",
		},
		UserIdentity: who,
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// counts parses the EMF lines in buf and sums each metric, checking that
// every line carries the Service dimension service.
func counts(t *testing.T, buf *syncBuffer, service string) map[string]int {
	t.Helper()
	got := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader([]byte(buf.String())))
	for sc.Scan() {
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name string }
				}
			} `json:"_aws"`
		}
		line := sc.Bytes()
		if err := json.Unmarshal(line, &doc); err != nil || len(doc.AWS.CloudWatchMetrics) != 1 {
			t.Fatalf("metrics line %q: %v, want one EMF directive", line, err)
		}
		var values map[string]any
		if err := json.Unmarshal(line, &values); err != nil {
			t.Fatal(err)
		}
		d := doc.AWS.CloudWatchMetrics[0]
		if d.Namespace != "once" || values["Service"] != service {
			t.Errorf("metrics line %q: namespace %q, Service %v; want once, %s", line, d.Namespace, values["Service"], service)
		}
		for _, m := range d.Metrics {
			n, _ := values[m.Name].(float64)
			got[m.Name] += int(n)
		}
	}
	return got
}
