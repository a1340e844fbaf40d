package lambdatest

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// keyAttr is the key of every table of template.yaml.
const keyAttr = "pk"

var sequence atomic.Int64

// Record returns a stream record as Lambda delivers it from a
// NEW_AND_OLD_IMAGES stream: the event name, the images before and after the
// change (nil when the record has none), the user identity who (nil but for
// removals by TTL, see TTLIdentity), the creation time at rounded down to
// whole seconds, the key pk of the new image (of the old one when there is
// no new image), and a fresh event ID and sequence number, increasing from
// one call to the next.
func Record(name events.DynamoDBOperationType, oldImage, newImage map[string]events.DynamoDBAttributeValue, who *events.DynamoDBUserIdentity, at time.Time) events.DynamoDBEventRecord {
	n := sequence.Add(1)
	img := newImage
	if img == nil {
		img = oldImage
	}
	return events.DynamoDBEventRecord{
		AWSRegion:      "us-east-1",
		EventID:        fmt.Sprintf("event-%d", n),
		EventName:      string(name),
		EventSource:    "aws:dynamodb",
		EventVersion:   "1.1",
		EventSourceArn: "arn:aws:dynamodb:us-east-1:123456789012:table/once-test/stream/2026-01-01T00:00:00.000",
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: at.Truncate(time.Second)},
			Keys:                        map[string]events.DynamoDBAttributeValue{keyAttr: img[keyAttr]},
			OldImage:                    oldImage,
			NewImage:                    newImage,
			SequenceNumber:              fmt.Sprintf("%021d", n),
			StreamViewType:              "NEW_AND_OLD_IMAGES",
		},
		UserIdentity: who,
	}
}

// TTLIdentity returns the user identity of a removal by DynamoDB's TTL
// process, as AWS and DynamoDB Local set it.
func TTLIdentity() *events.DynamoDBUserIdentity {
	return &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
}

// Failures returns the item identifiers (sequence numbers) of resp's batch
// item failures, nil when there are none.
func Failures(resp events.DynamoDBEventResponse) []string {
	var out []string
	for _, f := range resp.BatchItemFailures {
		out = append(out, f.ItemIdentifier)
	}
	return out
}
