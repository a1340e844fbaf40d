package devstack

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
)

// TestStreamsClientWaitsForSlowReads checks that the pollers' client waits
// for a GetRecords that DynamoDB Local answers after more than the 2 s the
// functions' calls get, in one attempt, instead of dropping it and asking
// again.
func TestStreamsClientWaitsForSlowReads(t *testing.T) {
	const delay = 2500 * time.Millisecond
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if got := r.Header.Get("X-Amz-Target"); got != "DynamoDBStreams_20120810.GetRecords" {
			t.Errorf("X-Amz-Target = %q, want GetRecords", got)
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Write([]byte(`{"Records":[],"NextShardIterator":"next"}`))
	}))
	defer srv.Close()

	client, err := streamsClient(t.Context(), srv.URL, "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := client.GetRecords(t.Context(), &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("it")})
	if err != nil {
		t.Fatalf("GetRecords answered after %v: %v", delay, err)
	}
	if got := aws.ToString(out.NextShardIterator); got != "next" {
		t.Errorf("NextShardIterator = %q, want next", got)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("GetRecords sent %d times, want 1", got)
	}
}
