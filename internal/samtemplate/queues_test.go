package samtemplate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestQueues(t *testing.T) {
	tmpl, err := Parse([]byte(`
Parameters:
  Visibility:
    Type: String
    Default: "60"
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: ignored
      VisibilityTimeout: !Ref Visibility
      MessageRetentionPeriod: 345600
      SqsManagedSseEnabled: true
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt Dead.Arn
        maxReceiveCount: 5
  Dead:
    Type: AWS::SQS::Queue
    Properties:
      MessageRetentionPeriod: 1209600
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Queues()
	if err != nil {
		t.Fatal(err)
	}
	want := []Queue{
		{LogicalID: "Dead", Attributes: map[string]string{"MessageRetentionPeriod": "1209600"}},
		{LogicalID: "Work", Attributes: map[string]string{"VisibilityTimeout": "60", "MessageRetentionPeriod": "345600", "SqsManagedSseEnabled": "true"},
			DeadLetter: "Dead", MaxReceiveCount: 5},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Queues() mismatch (-want +got):\n%s", diff)
	}

	for name, doc := range map[string]string{
		"dead letters to no queue": "Resources:\n  W:\n    Type: AWS::SQS::Queue\n    Properties:\n      RedrivePolicy: {deadLetterTargetArn: !GetAtt X.Arn, maxReceiveCount: 5}\n",
		"an ARN in clear":          "Resources:\n  W:\n    Type: AWS::SQS::Queue\n    Properties:\n      RedrivePolicy: {deadLetterTargetArn: arn:aws:sqs:us-east-1:1:x, maxReceiveCount: 5}\n",
		"no receive count":         "Resources:\n  D:\n    Type: AWS::SQS::Queue\n  W:\n    Type: AWS::SQS::Queue\n    Properties:\n      RedrivePolicy: {deadLetterTargetArn: !GetAtt D.Arn}\n",
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tmpl.Queues(); err == nil || !strings.Contains(err.Error(), "W") {
				t.Errorf("Queues() = %v, want an error naming W", err)
			}
		})
	}
}
