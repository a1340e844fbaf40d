package lambdatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/metrics"
)

func TestRecord(t *testing.T) {
	old := map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("acme#1"), "n": events.NewNumberAttribute("1")}
	at := time.Date(2026, 1, 1, 0, 0, 5, 900e6, time.UTC)
	first := Record(events.DynamoDBOperationTypeRemove, old, nil, TTLIdentity(), at)
	second := Record(events.DynamoDBOperationTypeInsert, nil, old, nil, at)

	b, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	var got events.DynamoDBEventRecord // as the handler receives it
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	if got.EventName != "REMOVE" || got.EventSource != "aws:dynamodb" || got.EventVersion != "1.1" || got.Change.StreamViewType != "NEW_AND_OLD_IMAGES" {
		t.Errorf("Record() = %s, want a REMOVE from aws:dynamodb 1.1, NEW_AND_OLD_IMAGES", b)
	}
	if want := time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC); !got.Change.ApproximateCreationDateTime.Equal(want) {
		t.Errorf("ApproximateCreationDateTime = %v, want %v", got.Change.ApproximateCreationDateTime.Time, want)
	}
	if k := got.Change.Keys["pk"]; k.String() != "acme#1" || len(got.Change.Keys) != 1 {
		t.Errorf("Keys = %v, want pk acme#1", got.Change.Keys)
	}
	if got.Change.NewImage != nil || got.Change.OldImage["n"].Number() != "1" {
		t.Errorf("images = %v, %v; want the old one only", got.Change.OldImage, got.Change.NewImage)
	}
	if got.UserIdentity == nil || *got.UserIdentity != *TTLIdentity() {
		t.Errorf("UserIdentity = %v, want %v", got.UserIdentity, TTLIdentity())
	}
	if second.Change.Keys["pk"].String() != "acme#1" || second.UserIdentity != nil {
		t.Errorf("INSERT record keys %v, identity %v; want pk acme#1, none", second.Change.Keys, second.UserIdentity)
	}
	if first.EventID == second.EventID || first.Change.SequenceNumber >= second.Change.SequenceNumber {
		t.Errorf("records %s (%s) then %s (%s), want fresh IDs and increasing sequence numbers",
			first.EventID, first.Change.SequenceNumber, second.EventID, second.Change.SequenceNumber)
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { fmt.Fprintf(&b, "{\"i\":%d}\n", i) })
	}
	wg.Wait()
	if n := len(b.Lines(t)); n != 20 {
		t.Errorf("Lines() has %d lines, want 20", n)
	}
}

func TestCounts(t *testing.T) {
	var b Buffer
	m := metrics.New(&b, "once", map[string]string{"Service": "sweeper"})
	m.Count("zombie_swept")
	m.Count("zombie_swept", "reconcile_scheduled")
	want := map[string]int{"zombie_swept": 2, "reconcile_scheduled": 1}
	if diff := cmp.Diff(want, Counts(t, b.String(), "sweeper")); diff != "" {
		t.Errorf("Counts() (-want +got):\n%s", diff)
	}

	// A process's output: log lines, and the metrics of several services.
	var out Buffer
	fmt.Fprintln(&out, `{"level":"INFO","msg":"hello"}`)
	fmt.Fprintln(&out, "not JSON")
	fmt.Fprint(&out, b.String())
	metrics.New(&out, "once", map[string]string{"Service": "api"}).Count("reserve_created")
	want["reserve_created"] = 1
	if diff := cmp.Diff(want, CountsAmong(out.String())); diff != "" {
		t.Errorf("CountsAmong() (-want +got):\n%s", diff)
	}
}

func TestCountsReports(t *testing.T) {
	var sweeper, other Buffer
	metrics.New(&sweeper, "once", map[string]string{"Service": "sweeper"}).Count("zombie_swept")
	metrics.New(&other, "other", map[string]string{"Service": "sweeper", "Stage": "dev"}).Count("x")
	tests := []struct {
		name, output, service string
		fatal                 bool
		errors                int
	}{
		{"the service's counts", sweeper.String(), "sweeper", false, 0},
		{"another service", sweeper.String(), "reconciler", false, 1},
		{"another namespace and dimensions", other.String(), "sweeper", false, 1},
		{"not a count", `{"_aws":{"CloudWatchMetrics":[{"Namespace":"once","Dimensions":[["Service"]],"Metrics":[{"Name":"x","Unit":"Seconds"}]}]},"Service":"sweeper","x":"1"}`, "sweeper", false, 1},
		{"a log line", `{"level":"INFO","msg":"hello"}`, "sweeper", true, 0},
		{"two directives", `{"_aws":{"CloudWatchMetrics":[{},{}]}}`, "sweeper", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Counts(r, tt.output, tt.service)
			}()
			<-done
			if r.fatal != tt.fatal || r.errors != tt.errors {
				t.Errorf("Counts(%q, %s): fatal %v, %d errors; want %v, %d", tt.output, tt.service, r.fatal, r.errors, tt.fatal, tt.errors)
			}
		})
	}
}

// recorder counts the failures reported to it instead of failing the test;
// Fatalf ends the calling goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	errors int
	fatal  bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }
func (r *recorder) Fatalf(string, ...any) { r.fatal = true; runtime.Goexit() }
func (r *recorder) Cleanup(func())        {}

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, time.Second, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("WaitFor returned after %d polls, want 3", n)
	}
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(r, 50*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if !r.fatal {
		t.Errorf("WaitFor(never) returned, want a fatal timeout")
	}
}

func TestFailures(t *testing.T) {
	if got := Failures(events.DynamoDBEventResponse{}); got != nil {
		t.Errorf("Failures(no failures) = %v, want nil", got)
	}
	resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: "2"}, {ItemIdentifier: "3"}}}
	if diff := cmp.Diff([]string{"2", "3"}, Failures(resp)); diff != "" {
		t.Errorf("Failures() (-want +got):\n%s", diff)
	}
}

// runFunc is a Runner.
type runFunc func(ctx context.Context) error

func (f runFunc) Run(ctx context.Context) error { return f(ctx) }

func TestStart(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		errors int
	}{
		{"returns nil when stopped", nil, 0},
		{"returns an error when stopped", errors.New("boom"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int32
			r := &recorder{TB: t}
			stop := Start(r, runFunc(func(ctx context.Context) error {
				runs.Add(1)
				<-ctx.Done()
				return tt.err
			}))
			stop()
			stop()
			if n := runs.Load(); n != 1 || r.errors != tt.errors {
				t.Errorf("Start(): %d runs, %d errors; want 1, %d", n, r.errors, tt.errors)
			}
		})
	}
}
