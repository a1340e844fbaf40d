package devstack

import (
	"encoding/json"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/samtemplate"
)

// recordDocument is rec in the form Lambda's event filtering reads (its
// JSON, as json.Marshal writes it and samtemplate.DecodeDocument decodes
// it), holding only the fields in want: the patterns read nothing else
// (samtemplate.Fields). The fields the project's patterns read (eventName,
// an image's attribute by its type) are built directly; any other is taken
// from the JSON of its value, so the document is what the whole record's
// JSON would hold there. A poller filters every record of its stream, so
// this keeps the local mapping from paying for a JSON round trip of each
// record's images, which AWS does not charge the function for.
func recordDocument(rec events.DynamoDBEventRecord, want samtemplate.Fields) (map[string]any, error) {
	doc := make(map[string]any, len(want))
	for k, sub := range want {
		var v any
		var err error
		switch k {
		case "awsRegion":
			v = rec.AWSRegion
		case "eventID":
			v = rec.EventID
		case "eventName":
			v = rec.EventName
		case "eventSource":
			v = rec.EventSource
		case "eventVersion":
			v = rec.EventVersion
		case "eventSourceARN":
			v = rec.EventSourceArn
		case "dynamodb":
			v, err = changeDocument(rec.Change, sub)
		case "userIdentity":
			if rec.UserIdentity == nil {
				continue // omitempty
			}
			v, err = jsonDocument(rec.UserIdentity)
		default:
			continue // not a field of the record
		}
		if err != nil {
			return nil, err
		}
		doc[k] = v
	}
	return doc, nil
}

// changeDocument is the record's "dynamodb" object, limited to want.
func changeDocument(c events.DynamoDBStreamRecord, want samtemplate.Fields) (any, error) {
	if want == nil {
		return jsonDocument(c)
	}
	doc := make(map[string]any, len(want))
	for k, sub := range want {
		var image map[string]events.DynamoDBAttributeValue
		switch k {
		case "Keys":
			image = c.Keys
		case "NewImage":
			image = c.NewImage
		case "OldImage":
			image = c.OldImage
		case "ApproximateCreationDateTime", "SequenceNumber", "SizeBytes", "StreamViewType":
			whole, err := jsonDocument(c)
			if err != nil {
				return nil, err
			}
			doc[k] = whole.(map[string]any)[k]
			continue
		default:
			continue
		}
		if len(image) == 0 {
			continue // omitempty
		}
		v, err := imageDocument(image, sub)
		if err != nil {
			return nil, err
		}
		doc[k] = v
	}
	return doc, nil
}

// imageDocument is an image (or the keys) of a change, limited to want.
func imageDocument(image map[string]events.DynamoDBAttributeValue, want samtemplate.Fields) (any, error) {
	if want == nil {
		return jsonDocument(image)
	}
	doc := make(map[string]any, len(want))
	for k, sub := range want {
		av, ok := image[k]
		if !ok {
			continue
		}
		v, err := attributeDocument(av, sub)
		if err != nil {
			return nil, err
		}
		doc[k] = v
	}
	return doc, nil
}

// attributeDocument is an attribute value ({"S": "..."} and the like),
// limited to want. A string is built directly; every other type is taken
// from its JSON.
func attributeDocument(av events.DynamoDBAttributeValue, want samtemplate.Fields) (any, error) {
	if av.DataType() == events.DataTypeString && want != nil {
		doc := map[string]any{}
		if _, ok := want["S"]; ok {
			doc["S"] = av.String()
		}
		return doc, nil
	}
	return jsonDocument(av)
}

// jsonDocument is v's JSON, decoded as filtering decodes events.
func jsonDocument(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return samtemplate.DecodeDocument(b)
}
