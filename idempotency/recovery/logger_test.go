package recovery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/lambdatest"
)

// noQueue is a Queue that is never reached: every case fails before it.
type noQueue struct{ t *testing.T }

func (q noQueue) Send(context.Context, string, time.Duration) error {
	q.t.Error("Send called")
	return nil
}

// TestDefaultLogger: without a Logger the recovery functions write nothing,
// neither through slog's default logger nor through package log (whose
// lines are unstructured), even where they fail; with one, each failure is
// one JSON line on it.
func TestDefaultLogger(t *testing.T) {
	now := time.Now()
	// A record image without expires_at_ms: undecodable, a failure each
	// function logs at ERROR.
	bad := func(status idempotency.Status) map[string]events.DynamoDBAttributeValue {
		rec := sweptReservation(idempotency.NewKey("acme", "logged"), true, now, now.Add(time.Minute))
		rec.Status = status
		img := stream.FromSDK(dynamo.ItemFromRecord(rec))
		delete(img, dynamo.AttrExpiresAtMS)
		return img
	}
	store := memory.New()
	resolvers := idempotency.Resolvers{route: idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
		t.Error("Resolve called")
		return idempotency.Resolution{}, nil
	})}
	tests := []struct {
		name string
		run  func(t *testing.T, log *slog.Logger) (failed bool)
	}{
		{"Scheduler", func(t *testing.T, log *slog.Logger) bool {
			s, err := recovery.NewScheduler(recovery.SchedulerConfig{Queue: noQueue{t}, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			resp, _ := s.Handle(t.Context(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
				lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, bad(idempotency.StatusInProgress), nil, now),
			}})
			return len(resp.BatchItemFailures) == 1
		}},
		{"Checker", func(t *testing.T, log *slog.Logger) bool {
			c, err := recovery.NewChecker(recovery.CheckerConfig{Store: store, Queue: noQueue{t}, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			resp, _ := c.Handle(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: "{"}}})
			return len(resp.BatchItemFailures) == 1
		}},
		{"Sweeper", func(t *testing.T, log *slog.Logger) bool {
			s, err := recovery.NewSweeper(recovery.SweeperConfig{Store: store, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			resp, _ := s.Handle(t.Context(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
				lambdatest.Record(events.DynamoDBOperationTypeRemove, bad(idempotency.StatusInProgress), nil, lambdatest.TTLIdentity(), now),
			}})
			return len(resp.BatchItemFailures) == 1
		}},
		{"Reconciler", func(t *testing.T, log *slog.Logger) bool {
			r, err := recovery.NewReconciler(recovery.ReconcilerConfig{Store: store, Resolvers: resolvers, Settle: time.Second, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			resp, _ := r.Handle(t.Context(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
				lambdatest.Record(events.DynamoDBOperationTypeModify, nil, bad(idempotency.StatusUnknown), nil, now),
			}})
			return len(resp.BatchItemFailures) == 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Whatever reaches slog's default logger or package log.
			var global bytes.Buffer
			prevSlog, prevLog := slog.Default(), log.Writer()
			slog.SetDefault(slog.New(slog.NewTextHandler(&global, &slog.HandlerOptions{Level: slog.LevelDebug})))
			log.SetOutput(&global)
			t.Cleanup(func() {
				slog.SetDefault(prevSlog)
				log.SetOutput(prevLog)
			})

			if !tt.run(t, nil) {
				t.Fatalf("%s with no Logger: no batch item failure, want the undecodable record failed", tt.name)
			}
			if global.Len() != 0 {
				t.Errorf("%s with no Logger wrote %q through slog's default logger or package log, want nothing", tt.name, global.String())
			}

			var own bytes.Buffer
			if !tt.run(t, slog.New(slog.NewJSONHandler(&own, nil))) {
				t.Fatalf("%s with a Logger: no batch item failure, want the undecodable record failed", tt.name)
			}
			var line struct{ Level, Msg, Err string }
			if err := json.Unmarshal(own.Bytes(), &line); err != nil || line.Level != "ERROR" || line.Err == "" {
				t.Errorf("%s with a Logger logged %q (%v), want one JSON line at ERROR with the error", tt.name, own.String(), err)
			}
			if global.Len() != 0 {
				t.Errorf("%s with a Logger wrote %q through slog's default logger or package log, want nothing", tt.name, global.String())
			}
		})
	}
}
