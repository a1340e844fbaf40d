package stream

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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

var allMembers = []any{
	types.AttributeValueMemberS{}, types.AttributeValueMemberN{}, types.AttributeValueMemberB{},
	types.AttributeValueMemberBOOL{}, types.AttributeValueMemberNULL{}, types.AttributeValueMemberSS{},
	types.AttributeValueMemberNS{}, types.AttributeValueMemberBS{}, types.AttributeValueMemberL{},
	types.AttributeValueMemberM{},
}
