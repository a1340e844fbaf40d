package deploytest

import (
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/samtemplate"
)

// deadLetterQueues returns the template's dead-letter queues: the stream
// mappings' on-failure destinations and the queues' redrive targets.
func deadLetterQueues(t *testing.T) []string {
	t.Helper()
	set := map[string]bool{}
	for _, fn := range template(t).Functions() {
		for _, ev := range fn.Events() {
			for _, r := range samtemplate.Refs(mapOf(mapOf(ev.Properties["DestinationConfig"])["OnFailure"])["Destination"]) {
				set[r.Name] = true
			}
		}
	}
	queues, err := template(t).Queues()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if q.DeadLetter != "" {
			set[q.DeadLetter] = true
		}
	}
	return sortedKeys(set)
}

// queueMapping is a function's SQS event source.
type queueMapping struct {
	function string
	event    samtemplate.Event
}

// queueMappings returns the SQS event sources, by the queue they read.
func queueMappings(t *testing.T) map[string][]queueMapping {
	t.Helper()
	out := map[string][]queueMapping{}
	for id, fn := range template(t).Functions() {
		for _, ev := range fn.Events() {
			if ev.Type != "SQS" {
				continue
			}
			refs := samtemplate.Refs(ev.Properties["Queue"])
			if len(refs) != 1 || refs[0].Attribute != "Arn" || template(t).Resources()[refs[0].Name].Type != "AWS::SQS::Queue" {
				t.Errorf("%s %s Queue = %v, want !GetAtt <Queue>.Arn", id, ev.Name, ev.Properties["Queue"])
				continue
			}
			out[refs[0].Name] = append(out[refs[0].Name], queueMapping{function: id, event: ev})
		}
	}
	return out
}

// TestQueues holds every queue to its role: a dead-letter queue (alarmed,
// kept 14 days, read by nobody) or a work queue read by exactly one
// function's event source mapping, which reports partial batch failures and
// whose redrive policy bounds the receives of a message that keeps failing.
func TestQueues(t *testing.T) {
	queues, err := template(t).Queues()
	if err != nil {
		t.Fatal(err)
	}
	dlqs := map[string]bool{}
	for _, id := range deadLetterQueues(t) {
		dlqs[id] = true
	}
	mappings := queueMappings(t)
	byID := map[string]samtemplate.Queue{}
	for _, q := range queues {
		byID[q.LogicalID] = q
	}
	var work []string
	for _, q := range queues {
		props := template(t).Resources()[q.LogicalID].Properties
		if props["SqsManagedSseEnabled"] != true && props["KmsMasterKeyId"] == nil {
			t.Errorf("%s is not encrypted (SqsManagedSseEnabled or KmsMasterKeyId)", q.LogicalID)
		}
		if _, ok := props["QueueName"]; ok {
			t.Errorf("%s sets QueueName: let CloudFormation name it, so that stacks do not clash", q.LogicalID)
		}
		if dlqs[q.LogicalID] {
			if len(mappings[q.LogicalID]) > 0 || q.DeadLetter != "" {
				t.Errorf("dead-letter queue %s is read by a function or has a redrive policy itself: dead letters wait for an operator", q.LogicalID)
			}
			if got := q.Attributes["MessageRetentionPeriod"]; got != "1209600" {
				t.Errorf("%s MessageRetentionPeriod = %q, want 1209600 (14 days)", q.LogicalID, got)
			}
			continue
		}
		work = append(work, q.LogicalID)
		ms := mappings[q.LogicalID]
		if len(ms) != 1 {
			t.Errorf("work queue %s is read by %d event source mappings, want one", q.LogicalID, len(ms))
			continue
		}
		m := ms[0]
		fn := template(t).Functions()[m.function]
		if q.DeadLetter == "" || q.MaxReceiveCount < 1 || q.MaxReceiveCount > 10 {
			t.Errorf("%s RedrivePolicy: dead-letter queue %q after %d receives, want one after 1-10", q.LogicalID, q.DeadLetter, q.MaxReceiveCount)
		}
		// A moved message keeps its enqueue time: the dead-letter queue
		// must keep it longer than the queue did.
		if dl := byID[q.DeadLetter]; atoi(t, dl.Attributes["MessageRetentionPeriod"]) <= atoi(t, q.Attributes["MessageRetentionPeriod"]) {
			t.Errorf("%s keeps messages %ss, its dead-letter queue %s %ss: want the dead-letter queue's longer",
				q.LogicalID, q.Attributes["MessageRetentionPeriod"], q.DeadLetter, dl.Attributes["MessageRetentionPeriod"])
		}
		// Lambda refuses a visibility timeout under the function's timeout
		// and advises six times it, so that a retried batch is not
		// delivered again while the function still runs it.
		timeout := time.Duration(fn.Properties["Timeout"].(int)) * time.Second
		visibility := time.Duration(atoi(t, q.Attributes["VisibilityTimeout"])) * time.Second
		if visibility < 6*timeout {
			t.Errorf("%s VisibilityTimeout %v < 6 x %s's Timeout %v", q.LogicalID, visibility, m.function, timeout)
		}
		p := m.event.Properties
		if diff := cmp.Diff([]any{"ReportBatchItemFailures"}, p["FunctionResponseTypes"]); diff != "" {
			t.Errorf("%s %s FunctionResponseTypes mismatch (-want +got):\n%s", m.function, m.event.Name, diff)
		}
		if n, ok := p["BatchSize"].(int); !ok || n < 1 || n > 10 {
			t.Errorf("%s %s BatchSize = %v, want 1-10 (more needs a batching window)", m.function, m.event.Name, p["BatchSize"])
		}
		for k := range p {
			switch k {
			case "Queue", "BatchSize", "FunctionResponseTypes", "ScalingConfig":
			default:
				t.Errorf("%s %s sets %s, which the devstack does not emulate", m.function, m.event.Name, k)
			}
		}
		if sc := mapOf(p["ScalingConfig"]); sc != nil {
			if n, ok := sc["MaximumConcurrency"].(int); !ok || n < 2 || n > 1000 {
				t.Errorf("%s ScalingConfig.MaximumConcurrency = %v, want 2-1000", m.function, sc["MaximumConcurrency"])
			}
		}
	}
	sort.Strings(work)
	if diff := cmp.Diff([]string{"CheckQueue", "ReceiptRetryQueue", "WorkerRetryQueue"}, work); diff != "" {
		t.Errorf("work queues mismatch (-want +got):\n%s", diff)
	}
	for id := range mappings {
		if _, ok := byID[id]; !ok {
			t.Errorf("an event source mapping reads %s, which is not a queue of the template", id)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Errorf("%q is not a number", s)
	}
	return n
}
