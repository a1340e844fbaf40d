package lambdatest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// RaceSQSBatches invokes the SQS function behind rt with batches from
// several goroutines at once, as an event source mapping with several
// pollers and a Lambda Managed Instances environment with several concurrent
// invocations do. Each batch holds one to ten messages from poison, which the
// function must fail, under message IDs of its own: t fails on any response
// that names another batch's messages, or not exactly its own.
func RaceSQSBatches(t testing.TB, rt *RuntimeAPI, poison func() events.SQSMessage) {
	t.Helper()
	const goroutines, each = 8, 40
	var seq atomic.Int64
	var wrong atomic.Int64
	var mu sync.Mutex
	var examples []string
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				var ev events.SQSEvent
				var want []string
				for range 1 + rand.IntN(10) {
					m := poison()
					m.MessageId = fmt.Sprintf("00000000-0000-4000-8000-%012d", seq.Add(1))
					ev.Records = append(ev.Records, m)
					want = append(want, m.MessageId)
				}
				payload, err := json.Marshal(ev)
				if err != nil {
					panic(err)
				}
				out, err := rt.Invoke(t.Context(), payload)
				var resp events.SQSEventResponse
				if err == nil {
					err = json.Unmarshal(out, &resp)
				}
				var got []string
				for _, f := range resp.BatchItemFailures {
					got = append(got, f.ItemIdentifier)
				}
				slices.Sort(got)
				if err != nil || !slices.Equal(got, want) {
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

// CheckSQSFunction runs the test binary's SQS function main (see Main) with
// env, AWS_LAMBDA_MAX_CONCURRENCY=8 and a RuntimeAPI, as Lambda Managed
// Instances run it, races batches of poison messages through it
// (RaceSQSBatches), and checks that everything the process wrote is JSON.
func CheckSQSFunction(t testing.TB, env map[string]string, poison func() events.SQSMessage) {
	t.Helper()
	rt := NewRuntimeAPI(t)
	full := map[string]string{"AWS_LAMBDA_RUNTIME_API": rt.Addr(), "AWS_LAMBDA_MAX_CONCURRENCY": "8"}
	for k, v := range env {
		full[k] = v
	}
	p := StartFunction(t, full)
	RaceSQSBatches(t, rt, poison)
	p.Stop(t)
}
