// Package sqsqueue is recovery.Queue on Amazon SQS: the check queue of the
// recovery.Scheduler and recovery.Checker, each message sent with its own
// DelaySeconds (one SendMessage call).
//
//	client, err := sqsqueue.NewClient(ctx)                      // AWS_REGION, SQS_ENDPOINT
//	checks, err := sqsqueue.New(client, os.Getenv("CHECK_QUEUE_URL")) // !Ref of the queue: its URL
//	scheduler, err := recovery.NewScheduler(recovery.SchedulerConfig{Queue: checks})
//
// SQS delays a message by at most 15 minutes (MaxDelay). Send sends a longer
// delay as MaxDelay, never fails on it: the message arrives early, and its
// consumer sends it on for the rest. The recovery.Checker does so, going by
// the record's stored lease deadline, so a check due in an hour is delivered
// four times, each hop at most MaxDelay and each one nearer the deadline: the
// chain ends by itself. A consumer of its own that sends long delays must do
// the same.
//
// It is a package of its own so that a function that uses no queue (the
// reconciler) does not link the SQS SDK.
package sqsqueue
