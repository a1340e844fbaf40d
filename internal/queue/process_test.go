package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/queue"
)

// TestProcess: every message is handled, at once, and those that failed
// are the batch item failures; after the context's end none is handled.
func TestProcess(t *testing.T) {
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "ok"}, {MessageId: "b", Body: "fail"}, {MessageId: "c", Body: "ok"}, {MessageId: "d", Body: "fail"}}}
	var running, most atomic.Int32
	release := make(chan struct{})
	handle := func(_ context.Context, m events.SQSMessage) error {
		n := running.Add(1)
		defer running.Add(-1)
		for old := most.Load(); n > old && !most.CompareAndSwap(old, n); old = most.Load() {
		}
		if n == int32(len(ev.Records)) {
			close(release)
		}
		<-release
		if m.Body == "fail" {
			return errors.New("failed")
		}
		return nil
	}
	got := queue.Process(t.Context(), ev, handle)
	want := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: "b"}, {ItemIdentifier: "d"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Process (-want +got):\n%s", diff)
	}
	if most.Load() != int32(len(ev.Records)) {
		t.Errorf("at most %d messages handled at once, want all %d", most.Load(), len(ev.Records))
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var called atomic.Int32
	got = queue.Process(ctx, ev, func(context.Context, events.SQSMessage) error { called.Add(1); return nil })
	if len(got.BatchItemFailures) != len(ev.Records) || called.Load() != 0 {
		t.Errorf("Process after the context's end = %v (%d handled), want every message failed, none handled", got, called.Load())
	}
}
