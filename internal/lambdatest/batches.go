package lambdatest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// RaceBatches invokes the stream function behind rt with batches from
// several goroutines at once, as an event source mapping with parallel
// shards and a Lambda Managed Instances environment with several concurrent
// invocations do. Each batch holds records the function ignores around one
// poison record, at a random place, so that its response must name exactly
// the poison record and every later one (stream.Process stops at the first
// failure): t fails on any response that names another batch's records, or
// not exactly its own.
func RaceBatches(t testing.TB, rt *RuntimeAPI, ignored, poison func() events.DynamoDBEventRecord) {
	t.Helper()
	raceBatches(t, rt, ignored, poison, true)
}

// raceBatches is RaceBatches; a response must name the poison record and,
// with later, every record after it.
func raceBatches(t testing.TB, rt *RuntimeAPI, ignored, poison func() events.DynamoDBEventRecord, later bool) {
	t.Helper()
	const goroutines, each, size = 8, 40, 6
	var wrong atomic.Int64
	var mu sync.Mutex
	var examples []string
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				at := rand.IntN(size)
				var ev events.DynamoDBEvent
				for i := range size {
					rec := ignored()
					if i == at {
						rec = poison()
					}
					ev.Records = append(ev.Records, rec)
				}
				var want []string
				for _, rec := range ev.Records[at:] {
					want = append(want, rec.Change.SequenceNumber)
				}
				if !later {
					want = want[:1]
				}
				payload, err := json.Marshal(ev)
				if err != nil {
					panic(err)
				}
				out, err := rt.Invoke(t.Context(), payload)
				var resp events.DynamoDBEventResponse
				if err == nil {
					err = json.Unmarshal(out, &resp)
				}
				if got := Failures(resp); err != nil || !slices.Equal(got, want) {
					wrong.Add(1)
					mu.Lock()
					if len(examples) < 5 {
						examples = append(examples, fmt.Sprintf("failures %v (%v), want %v", got, err, want))
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of %d batches got another answer than their own: %v", n, goroutines*each, examples)
	}
	if n := rt.MaxInFlight(); n < 2 {
		t.Errorf("at most %d invocation ran at once; want several (AWS_LAMBDA_MAX_CONCURRENCY)", n)
	}
}

// CheckStreamFunction runs the test binary's stream function main (see Main)
// with env, AWS_LAMBDA_MAX_CONCURRENCY=8 and a RuntimeAPI, as Lambda Managed
// Instances run it, races batches through it (RaceBatches) with poison
// records from poison among records no stream function acts on, and checks
// that everything the process wrote is JSON.
func CheckStreamFunction(t testing.TB, env map[string]string, poison func() events.DynamoDBEventRecord) {
	t.Helper()
	checkStreamFunction(t, env, poison, true)
}

// CheckStreamFunctionEach is CheckStreamFunction for a function that
// handles the records of a batch each on its own (the receipts function):
// a response must name exactly the batch's poison record.
func CheckStreamFunctionEach(t testing.TB, env map[string]string, poison func() events.DynamoDBEventRecord) {
	t.Helper()
	checkStreamFunction(t, env, poison, false)
}

func checkStreamFunction(t testing.TB, env map[string]string, poison func() events.DynamoDBEventRecord, later bool) {
	t.Helper()
	rt := NewRuntimeAPI(t)
	full := map[string]string{"AWS_LAMBDA_RUNTIME_API": rt.Addr(), "AWS_LAMBDA_MAX_CONCURRENCY": "8"}
	for k, v := range env {
		full[k] = v
	}
	p := StartFunction(t, full)
	raceBatches(t, rt, completedModify, poison, later)
	p.Stop(t)
}

// completedModify is a MODIFY of an item to status COMPLETED: neither a
// pending payment's insert (worker), nor an IN_PROGRESS record's removal
// (sweeper), nor a record becoming UNKNOWN (reconciler).
func completedModify() events.DynamoDBEventRecord {
	img := map[string]events.DynamoDBAttributeValue{
		keyAttr:  events.NewStringAttribute("acme#ignored"),
		"status": events.NewStringAttribute("COMPLETED"),
	}
	return Record(events.DynamoDBOperationTypeModify, img, img, nil, time.Now())
}
