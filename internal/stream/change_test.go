package stream

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestChangeByTTL(t *testing.T) {
	ttl := &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
	tests := []struct {
		name string
		rec  events.DynamoDBEventRecord
		want bool
	}{
		{"TTL removal", events.DynamoDBEventRecord{EventName: "REMOVE", UserIdentity: ttl}, true},
		{"client delete", events.DynamoDBEventRecord{EventName: "REMOVE"}, false},
		{"other service", events.DynamoDBEventRecord{EventName: "REMOVE", UserIdentity: &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "other.amazonaws.com"}}, false},
		{"other type", events.DynamoDBEventRecord{EventName: "REMOVE", UserIdentity: &events.DynamoDBUserIdentity{Type: "User", PrincipalID: "dynamodb.amazonaws.com"}}, false},
		{"not a removal", events.DynamoDBEventRecord{EventName: "MODIFY", UserIdentity: ttl}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewChange(tt.rec).ByTTL(); got != tt.want {
				t.Errorf("ByTTL() = %v, want %v", got, tt.want)
			}
		})
	}
}

// A record as Lambda sends it for a TTL removal (AWS documentation's shape).
const ttlRemovalJSON = `{
  "eventID": "a9b8c7", "eventName": "REMOVE", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
  "awsRegion": "us-east-1",
  "dynamodb": {
    "ApproximateCreationDateTime": 1700000000,
    "Keys": {"pk": {"S": "acme#k1"}},
    "OldImage": {"pk": {"S": "acme#k1"}, "status": {"S": "COMPLETED"}, "expires_at": {"N": "1699999990"},
                 "external": {"BOOL": false}, "response_body": {"B": "aGk="},
                 "response_headers": {"M": {"Content-Type": {"S": "application/json"}}}},
    "SequenceNumber": "4421584500000000017450439091", "SizeBytes": 120, "StreamViewType": "NEW_AND_OLD_IMAGES"
  },
  "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
  "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/once-idempotency/stream/2024-01-01T00:00:00.000"
}`

func TestNewChangeDecode(t *testing.T) {
	var rec events.DynamoDBEventRecord
	if err := json.Unmarshal([]byte(ttlRemovalJSON), &rec); err != nil {
		t.Fatal(err)
	}
	c := NewChange(rec)
	if c.EventName != events.DynamoDBOperationTypeRemove || c.SequenceNumber != "4421584500000000017450439091" || c.EventID != "a9b8c7" || !c.ByTTL() {
		t.Errorf("NewChange() = %+v, want a TTL REMOVE with the record's ids", c)
	}
	type item struct {
		PK        string            `dynamodbav:"pk"`
		Status    string            `dynamodbav:"status"`
		ExpiresAt int64             `dynamodbav:"expires_at"`
		External  bool              `dynamodbav:"external"`
		Body      []byte            `dynamodbav:"response_body"`
		Headers   map[string]string `dynamodbav:"response_headers"`
	}
	var got item
	if err := c.DecodeOld(&got); err != nil {
		t.Fatalf("DecodeOld: %v", err)
	}
	want := item{PK: "acme#k1", Status: "COMPLETED", ExpiresAt: 1699999990, Body: []byte("hi"),
		Headers: map[string]string{"Content-Type": "application/json"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeOld (-want +got):\n%s", diff)
	}
	if err := c.DecodeNew(&got); !errors.Is(err, ErrNoImage) {
		t.Errorf("DecodeNew on a REMOVE = %v, want ErrNoImage", err)
	}
}

func TestAttributeConversions(t *testing.T) {
	// Every attribute type, nested, from the Streams API to the event form
	// and on to the DynamoDB SDK's form.
	in := map[string]streamtypes.AttributeValue{
		"s":    &streamtypes.AttributeValueMemberS{Value: "x"},
		"n":    &streamtypes.AttributeValueMemberN{Value: "12.5"},
		"b":    &streamtypes.AttributeValueMemberB{Value: []byte{0, 1, 2}},
		"bool": &streamtypes.AttributeValueMemberBOOL{Value: true},
		"null": &streamtypes.AttributeValueMemberNULL{Value: true},
		"ss":   &streamtypes.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns":   &streamtypes.AttributeValueMemberNS{Value: []string{"1", "2"}},
		"bs":   &streamtypes.AttributeValueMemberBS{Value: [][]byte{{1}, {2}}},
		"l": &streamtypes.AttributeValueMemberL{Value: []streamtypes.AttributeValue{
			&streamtypes.AttributeValueMemberS{Value: "y"},
			&streamtypes.AttributeValueMemberM{Value: map[string]streamtypes.AttributeValue{"k": &streamtypes.AttributeValueMemberN{Value: "1"}}},
		}},
		"m":      &streamtypes.AttributeValueMemberM{Value: map[string]streamtypes.AttributeValue{"k": &streamtypes.AttributeValueMemberBOOL{}}},
		"emptym": &streamtypes.AttributeValueMemberM{Value: map[string]streamtypes.AttributeValue{}},
		"nilb":   &streamtypes.AttributeValueMemberB{},
		"nilbs":  &streamtypes.AttributeValueMemberBS{Value: [][]byte{nil}},
	}
	want := map[string]types.AttributeValue{
		"s":    &types.AttributeValueMemberS{Value: "x"},
		"n":    &types.AttributeValueMemberN{Value: "12.5"},
		"b":    &types.AttributeValueMemberB{Value: []byte{0, 1, 2}},
		"bool": &types.AttributeValueMemberBOOL{Value: true},
		"null": &types.AttributeValueMemberNULL{Value: true},
		"ss":   &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns":   &types.AttributeValueMemberNS{Value: []string{"1", "2"}},
		"bs":   &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2}}},
		"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{
			&types.AttributeValueMemberS{Value: "y"},
			&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberN{Value: "1"}}},
		}},
		"m":      &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberBOOL{}}},
		"emptym": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
		"nilb":   &types.AttributeValueMemberB{Value: []byte{}},
		"nilbs":  &types.AttributeValueMemberBS{Value: [][]byte{{}}},
	}
	ev, err := fromStreams(in)
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON too, as the handler receives it; and back from the SDK's
	// form, which FromSDK converts to the same event form.
	images := map[string]map[string]events.DynamoDBAttributeValue{
		"fromStreams":          ev,
		"fromStreams via JSON": viaJSON(t, ev),
		"FromSDK":              FromSDK(want),
		"FromSDK via JSON":     viaJSON(t, FromSDK(want)),
	}
	for name, m := range images {
		if diff := cmp.Diff(want, ToSDK(m), cmpopts.IgnoreUnexported(allMembers...)); diff != "" {
			t.Errorf("ToSDK(%s) (-want +got):\n%s", name, diff)
		}
	}
	if ToSDK(nil) != nil {
		t.Errorf("ToSDK(nil) != nil")
	}
	if _, err := fromStreams(map[string]streamtypes.AttributeValue{"x": &streamtypes.UnknownUnionMember{Tag: "Z"}}); err == nil {
		t.Errorf("fromStreams(unknown member) succeeded, want an error")
	}
}

// viaJSON returns img as a handler decodes it from the event's JSON.
func viaJSON(t *testing.T, img map[string]events.DynamoDBAttributeValue) map[string]events.DynamoDBAttributeValue {
	t.Helper()
	b, err := json.Marshal(img)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]events.DynamoDBAttributeValue
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return decoded
}

var allMembers = []any{
	types.AttributeValueMemberS{}, types.AttributeValueMemberN{}, types.AttributeValueMemberB{},
	types.AttributeValueMemberBOOL{}, types.AttributeValueMemberNULL{}, types.AttributeValueMemberSS{},
	types.AttributeValueMemberNS{}, types.AttributeValueMemberBS{}, types.AttributeValueMemberL{},
	types.AttributeValueMemberM{},
}

func TestFromSDKEdges(t *testing.T) {
	if got := FromSDK(nil); got != nil {
		t.Errorf("FromSDK(nil) = %v, want nil", got)
	}
	// Nil slices and maps become empty ones, which the event's JSON form
	// holds; values with no event form are left out.
	got := ToSDK(FromSDK(map[string]types.AttributeValue{
		"nilb":    &types.AttributeValueMemberB{},
		"nilbs":   &types.AttributeValueMemberBS{Value: [][]byte{nil}},
		"nilm":    &types.AttributeValueMemberM{},
		"nill":    &types.AttributeValueMemberL{},
		"nil":     nil,
		"unknown": &types.UnknownUnionMember{Tag: "Z"},
		"l":       &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.UnknownUnionMember{Tag: "Z"}, &types.AttributeValueMemberS{Value: "y"}}},
	}))
	want := map[string]types.AttributeValue{
		"nilb":  &types.AttributeValueMemberB{Value: []byte{}},
		"nilbs": &types.AttributeValueMemberBS{Value: [][]byte{{}}},
		"nilm":  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
		"nill":  &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		"l":     &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "y"}}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(allMembers...)); diff != "" {
		t.Errorf("ToSDK(FromSDK()) (-want +got):\n%s", diff)
	}
}
