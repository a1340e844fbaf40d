package stream

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

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
