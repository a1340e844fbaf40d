package stream

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// ToSDK converts a Lambda event image (or key map) to the DynamoDB SDK's
// attribute values, so that attributevalue.UnmarshalMap can decode it and
// the result can be written back with the SDK. A nil map gives nil.
func ToSDK(m map[string]events.DynamoDBAttributeValue) map[string]types.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = toSDK(v)
	}
	return out
}

func toSDK(v events.DynamoDBAttributeValue) types.AttributeValue {
	switch v.DataType() {
	case events.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}
	case events.DataTypeBinarySet:
		return &types.AttributeValueMemberBS{Value: v.BinarySet()}
	case events.DataTypeList:
		l := v.List()
		out := make([]types.AttributeValue, len(l))
		for i, e := range l {
			out[i] = toSDK(e)
		}
		return &types.AttributeValueMemberL{Value: out}
	case events.DataTypeMap:
		return &types.AttributeValueMemberM{Value: ToSDK(v.Map())}
	case events.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}
	case events.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: v.NumberSet()}
	case events.DataTypeNull:
		return &types.AttributeValueMemberNULL{Value: true}
	case events.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}
	case events.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: v.StringSet()}
	default: // events.DataTypeBinary, also the zero value
		if v.IsNull() {
			return &types.AttributeValueMemberB{}
		}
		return &types.AttributeValueMemberB{Value: v.Binary()}
	}
}

// FromSDK converts the DynamoDB SDK's attribute values (an item as GetItem
// returns it) to a Lambda event image, the inverse of ToSDK: the image a
// stream record carries for that item. A nil map gives nil. A nil value, or
// one of a type the SDK does not know (types.UnknownUnionMember), has no event
// form and is left out.
func FromSDK(m map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		if e, ok := fromSDK(v); ok {
			out[k] = e
		}
	}
	return out
}

func fromSDK(v types.AttributeValue) (events.DynamoDBAttributeValue, bool) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value), true
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value), true
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(nonNil(v.Value)), true
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value), true
	case *types.AttributeValueMemberNULL:
		return events.NewNullAttribute(), true
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(nonNil(v.Value)), true
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(nonNil(v.Value)), true
	case *types.AttributeValueMemberBS:
		bs := make([][]byte, len(v.Value))
		for i, b := range v.Value {
			bs[i] = nonNil(b)
		}
		return events.NewBinarySetAttribute(bs), true
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, 0, len(v.Value))
		for _, e := range v.Value {
			if c, ok := fromSDK(e); ok {
				l = append(l, c)
			}
		}
		return events.NewListAttribute(l), true
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(nonNilMap(FromSDK(v.Value))), true
	}
	return events.DynamoDBAttributeValue{}, false
}

// fromStreams converts a DynamoDB Streams image to the Lambda event's form.
func fromStreams(m map[string]streamtypes.AttributeValue) (map[string]events.DynamoDBAttributeValue, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		e, err := fromStreamsValue(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = e
	}
	return out, nil
}

func fromStreamsValue(v streamtypes.AttributeValue) (events.DynamoDBAttributeValue, error) {
	switch v := v.(type) {
	case *streamtypes.AttributeValueMemberB:
		return events.NewBinaryAttribute(nonNil(v.Value)), nil
	case *streamtypes.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value), nil
	case *streamtypes.AttributeValueMemberBS:
		bs := make([][]byte, len(v.Value))
		for i, b := range v.Value {
			bs[i] = nonNil(b)
		}
		return events.NewBinarySetAttribute(bs), nil
	case *streamtypes.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			c, err := fromStreamsValue(e)
			if err != nil {
				return events.DynamoDBAttributeValue{}, fmt.Errorf("list element %d: %w", i, err)
			}
			l[i] = c
		}
		return events.NewListAttribute(l), nil
	case *streamtypes.AttributeValueMemberM:
		m, err := fromStreams(v.Value)
		if err != nil {
			return events.DynamoDBAttributeValue{}, err
		}
		return events.NewMapAttribute(nonNilMap(m)), nil
	case *streamtypes.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value), nil
	case *streamtypes.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(nonNil(v.Value)), nil
	case *streamtypes.AttributeValueMemberNULL:
		return events.NewNullAttribute(), nil
	case *streamtypes.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value), nil
	case *streamtypes.AttributeValueMemberSS:
		return events.NewStringSetAttribute(nonNil(v.Value)), nil
	default:
		return events.DynamoDBAttributeValue{}, fmt.Errorf("unsupported attribute value %T", v)
	}
}

// nonNil returns s, or an empty slice for nil: the event's JSON form must
// hold a value ("" or []), never null, or Lambda's decoder rejects it.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// nonNilMap returns m, or an empty map for nil, for the same reason.
func nonNilMap(m map[string]events.DynamoDBAttributeValue) map[string]events.DynamoDBAttributeValue {
	if m == nil {
		return map[string]events.DynamoDBAttributeValue{}
	}
	return m
}
