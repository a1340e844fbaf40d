package stream

import (
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	pubstream "github.com/oncehq/once/idempotency/stream"
)

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
		"FromSDK":              pubstream.FromSDK(want),
		"FromSDK via JSON":     viaJSON(t, pubstream.FromSDK(want)),
	}
	for name, m := range images {
		if diff := cmp.Diff(want, pubstream.ToSDK(m), cmpopts.IgnoreUnexported(allMembers...)); diff != "" {
			t.Errorf("ToSDK(%s) (-want +got):\n%s", name, diff)
		}
	}
	if pubstream.ToSDK(nil) != nil {
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
