package stream

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"
)

func TestProcess(t *testing.T) {
	tests := []struct {
		name      string
		seqs      []string
		fail      map[string]bool // records fn fails
		cancelAt  string          // record before which ctx is cancelled
		wantCalls []string
		wantFail  []string
	}{
		{name: "empty batch"},
		{name: "all succeed", seqs: []string{"1", "2", "3"}, wantCalls: []string{"1", "2", "3"}},
		{name: "first fails", seqs: []string{"1", "2", "3"}, fail: map[string]bool{"1": true},
			wantCalls: []string{"1"}, wantFail: []string{"1", "2", "3"}},
		{name: "middle fails", seqs: []string{"1", "2", "3"}, fail: map[string]bool{"2": true},
			wantCalls: []string{"1", "2"}, wantFail: []string{"2", "3"}},
		{name: "last fails", seqs: []string{"1", "2", "3"}, fail: map[string]bool{"3": true},
			wantCalls: []string{"1", "2", "3"}, wantFail: []string{"3"}},
		{name: "stops at the first of several failures", seqs: []string{"1", "2", "3", "4"}, fail: map[string]bool{"2": true, "4": true},
			wantCalls: []string{"1", "2"}, wantFail: []string{"2", "3", "4"}},
		{name: "cancelled context", seqs: []string{"1", "2", "3"}, cancelAt: "2",
			wantCalls: []string{"1"}, wantFail: []string{"2", "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var ev events.DynamoDBEvent
			for _, s := range tt.seqs {
				ev.Records = append(ev.Records, events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{SequenceNumber: s}})
			}
			var calls []string
			resp := Process(ctx, ev, func(ctx context.Context, rec events.DynamoDBEventRecord) error {
				seq := rec.Change.SequenceNumber
				calls = append(calls, seq)
				if tt.fail[seq] {
					return errors.New("boom")
				}
				for i, s := range tt.seqs {
					if s == seq && i+1 < len(tt.seqs) && tt.seqs[i+1] == tt.cancelAt {
						cancel()
					}
				}
				return nil
			})
			if diff := cmp.Diff(tt.wantCalls, calls); diff != "" {
				t.Errorf("fn calls (-want +got):\n%s", diff)
			}
			var got []string
			for _, f := range resp.BatchItemFailures {
				got = append(got, f.ItemIdentifier)
			}
			if diff := cmp.Diff(tt.wantFail, got); diff != "" {
				t.Errorf("batch item failures (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAll(t *testing.T) {
	handler := func(failing ...string) Handler {
		return func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			var resp events.DynamoDBEventResponse
			for _, f := range failing {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: f})
			}
			return resp, nil
		}
	}
	boom := func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{}, errors.New("boom")
	}
	var ev events.DynamoDBEvent
	for _, s := range []string{"1", "2", "3", "4"} {
		ev.Records = append(ev.Records, events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{SequenceNumber: s}})
	}
	tests := []struct {
		name     string
		handlers []Handler
		wantFail []string
		wantErr  bool
	}{
		{name: "all succeed", handlers: []Handler{handler(), handler()}},
		{name: "one fails from 3", handlers: []Handler{handler(), handler("3", "4")}, wantFail: []string{"3", "4"}},
		{name: "the earliest failure of either", handlers: []Handler{handler("4"), handler("2", "3", "4")}, wantFail: []string{"2", "3", "4"}},
		{name: "an error fails the batch", handlers: []Handler{handler(), boom}, wantErr: true},
		// Lambda takes a failure naming no record of the batch as the
		// whole batch failing: All must not drop it and checkpoint.
		{name: "an empty identifier fails the batch", handlers: []Handler{handler(), handler("")}, wantFail: []string{"1", "2", "3", "4"}},
		{name: "an unknown identifier fails the batch", handlers: []Handler{handler("5"), handler()}, wantFail: []string{"1", "2", "3", "4"}},
		{name: "an unknown identifier beside a known one", handlers: []Handler{handler("3", "x")}, wantFail: []string{"1", "2", "3", "4"}},
		{name: "an empty identifier beside the other's later failure", handlers: []Handler{handler(""), handler("4")}, wantFail: []string{"1", "2", "3", "4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := All(tt.handlers...)(t.Context(), ev)
			if (err != nil) != tt.wantErr {
				t.Fatalf("All() error = %v, want error: %v", err, tt.wantErr)
			}
			var got []string
			for _, f := range resp.BatchItemFailures {
				got = append(got, f.ItemIdentifier)
			}
			if diff := cmp.Diff(tt.wantFail, got); diff != "" {
				t.Errorf("batch item failures (-want +got):\n%s", diff)
			}
		})
	}
}
