package stream

import (
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

func TestOutcome(t *testing.T) {
	recs := []events.DynamoDBEventRecord{
		{Change: events.DynamoDBStreamRecord{SequenceNumber: "10"}},
		{Change: events.DynamoDBStreamRecord{SequenceNumber: "11"}},
		{Change: events.DynamoDBStreamRecord{SequenceNumber: "12"}},
	}
	failures := func(ids ...string) events.DynamoDBEventResponse {
		var r events.DynamoDBEventResponse
		for _, id := range ids {
			r.BatchItemFailures = append(r.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: id})
		}
		return r
	}
	tests := []struct {
		name        string
		resp        events.DynamoDBEventResponse
		err         error
		wantNext    int
		wantPartial bool
	}{
		{name: "success", wantNext: 3},
		{name: "empty failure list", resp: events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}, wantNext: 3},
		{name: "handler error", err: errors.New("boom"), wantNext: 0},
		{name: "handler error wins over failures", resp: failures("12"), err: errors.New("boom"), wantNext: 0},
		{name: "one failure", resp: failures("11"), wantNext: 1, wantPartial: true},
		{name: "lowest failure wins", resp: failures("12", "11"), wantNext: 1, wantPartial: true},
		{name: "empty identifier fails the batch", resp: failures("12", ""), wantNext: 0},
		{name: "unknown identifier fails the batch", resp: failures("99"), wantNext: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, partial, reason := outcome(recs, tt.resp, tt.err)
			if next != tt.wantNext || partial != tt.wantPartial {
				t.Errorf("outcome() = %d, %v (%q), want %d, %v", next, partial, reason, tt.wantNext, tt.wantPartial)
			}
			if next < len(recs) && reason == "" {
				t.Errorf("outcome() gave no reason for a failure")
			}
		})
	}
}
