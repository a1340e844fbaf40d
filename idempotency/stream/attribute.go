package stream

import (
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
