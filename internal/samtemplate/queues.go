package samtemplate

import (
	"fmt"
	"sort"
	"strconv"
)

// Queue is an AWS::SQS::Queue defined by the template.
type Queue struct {
	// LogicalID is the queue's logical ID (CheckQueue, ...).
	LogicalID string
	// Attributes are the queue's properties as SQS's CreateQueue takes
	// them (VisibilityTimeout, MessageRetentionPeriod, ...), resolved with
	// the parameters' defaults; RedrivePolicy and QueueName are left out.
	Attributes map[string]string
	// DeadLetter is the logical ID of the queue its RedrivePolicy sends
	// messages to (deadLetterTargetArn: !GetAtt <Queue>.Arn), empty when it
	// has none; MaxReceiveCount is the policy's maxReceiveCount.
	DeadLetter      string
	MaxReceiveCount int
}

// queueAttributes are the AWS::SQS::Queue properties that are CreateQueue
// attributes of the same name.
var queueAttributes = []string{
	"DelaySeconds", "MaximumMessageSize", "MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds",
	"VisibilityTimeout", "SqsManagedSseEnabled", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds",
}

// Queues returns the template's AWS::SQS::Queue resources, sorted by logical
// ID, dead-letter queues before the queues that name them.
func (t *Template) Queues() ([]Queue, error) {
	vars := t.ParameterDefaults()
	byID := map[string]Queue{}
	for id, r := range t.ResourcesOfType("AWS::SQS::Queue") {
		q := Queue{LogicalID: id, Attributes: map[string]string{}}
		for _, name := range queueAttributes {
			v, ok := r.Properties[name]
			if !ok {
				continue
			}
			s, err := String(v, vars)
			if err != nil {
				return nil, fmt.Errorf("samtemplate: %s %s: %w", id, name, err)
			}
			q.Attributes[name] = s
		}
		if raw, ok := r.Properties["RedrivePolicy"]; ok {
			p, _ := raw.(map[string]any)
			refs := Refs(p["deadLetterTargetArn"])
			if len(refs) != 1 || refs[0].Attribute != "Arn" {
				return nil, fmt.Errorf("samtemplate: %s RedrivePolicy.deadLetterTargetArn is not !GetAtt <Queue>.Arn", id)
			}
			n, err := String(p["maxReceiveCount"], vars)
			if err != nil {
				return nil, fmt.Errorf("samtemplate: %s RedrivePolicy.maxReceiveCount: %w", id, err)
			}
			if q.MaxReceiveCount, err = strconv.Atoi(n); err != nil || q.MaxReceiveCount < 1 {
				return nil, fmt.Errorf("samtemplate: %s RedrivePolicy.maxReceiveCount %q is not a positive number", id, n)
			}
			q.DeadLetter = refs[0].Name
		}
		byID[id] = q
	}
	for id, q := range byID {
		if _, ok := byID[q.DeadLetter]; q.DeadLetter != "" && !ok {
			return nil, fmt.Errorf("samtemplate: %s sends dead letters to %s, which is not a queue of the template", id, q.DeadLetter)
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []Queue
	added := map[string]bool{}
	var add func(id string)
	add = func(id string) {
		if added[id] {
			return
		}
		added[id] = true
		if dl := byID[id].DeadLetter; dl != "" {
			add(dl)
		}
		out = append(out, byID[id])
	}
	for _, id := range ids {
		add(id)
	}
	return out, nil
}
