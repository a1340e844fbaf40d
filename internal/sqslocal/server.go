package sqslocal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "000000000000"
	// maxRequest bounds a request body: a batch of ten messages of the
	// largest size, JSON-escaped, and the rest.
	maxRequest = 8 << 20
)

// Options configures a Server.
type Options struct {
	// Region and AccountID name the queues' ARNs (DefaultRegion,
	// DefaultAccountID).
	Region    string
	AccountID string
	// Logger receives one debug line per request and the errors (default:
	// discard). Message bodies are never logged.
	Logger *slog.Logger
}

// Server is the SQS endpoint, an http.Handler. It is safe for concurrent
// use; its queues live in memory until it is dropped.
type Server struct {
	region, account string
	log             *slog.Logger

	mu     sync.Mutex
	queues map[string]*queue // by name
}

// New returns a Server with no queues.
func New(opts Options) *Server {
	s := &Server{region: opts.Region, account: opts.AccountID, log: opts.Logger, queues: map[string]*queue{}}
	if s.region == "" {
		s.region = DefaultRegion
	}
	if s.account == "" {
		s.account = DefaultAccountID
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// apiError is an SQS error answer.
type apiError struct {
	// code is the error shape's name (QueueDoesNotExist), query the
	// awsQueryCompatible code (AWS.SimpleQueueService.NonExistentQueue).
	code, query, message string
	status               int // 400 unless set
	server               bool
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

// Errors shared by several operations.
func noQueue() *apiError {
	return &apiError{code: "QueueDoesNotExist", query: "AWS.SimpleQueueService.NonExistentQueue",
		message: "The specified queue does not exist."}
}

func invalidParameter(format string, args ...any) *apiError {
	return &apiError{code: "InvalidParameterValue", query: "InvalidParameterValue", message: fmt.Sprintf(format, args...)}
}

func missingParameter(name string) *apiError {
	return &apiError{code: "MissingParameter", query: "MissingParameter",
		message: fmt.Sprintf("The request must contain the parameter %s.", name)}
}

// operations maps X-Amz-Target's operation names to their handlers; each
// decodes its request from the body and returns the answer to encode.
var operations = map[string]func(s *Server, ctx context.Context, host string, body []byte) (any, error){
	"CreateQueue":                  (*Server).createQueue,
	"DeleteQueue":                  (*Server).deleteQueue,
	"GetQueueUrl":                  (*Server).getQueueURL,
	"ListQueues":                   (*Server).listQueues,
	"GetQueueAttributes":           (*Server).getQueueAttributes,
	"SetQueueAttributes":           (*Server).setQueueAttributes,
	"PurgeQueue":                   (*Server).purgeQueue,
	"ListDeadLetterSourceQueues":   (*Server).listDeadLetterSourceQueues,
	"SendMessage":                  (*Server).sendMessage,
	"SendMessageBatch":             (*Server).sendMessageBatch,
	"ReceiveMessage":               (*Server).receiveMessage,
	"DeleteMessage":                (*Server).deleteMessage,
	"DeleteMessageBatch":           (*Server).deleteMessageBatch,
	"ChangeMessageVisibility":      (*Server).changeMessageVisibility,
	"ChangeMessageVisibilityBatch": (*Server).changeMessageVisibilityBatch,
}

// ServeHTTP serves the AWS JSON 1.0 protocol: POST / with
// X-Amz-Target: AmazonSQS.<Operation>.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, "AmazonSQS.")
	handler := operations[op]
	if r.Method != http.MethodPost || !ok || handler == nil {
		s.fail(w, target, &apiError{code: "UnknownOperationException", query: "InvalidAction",
			message: fmt.Sprintf("%s %s with X-Amz-Target %q is not an operation this emulator serves.", r.Method, r.URL.Path, target)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequest))
	if err != nil {
		s.fail(w, op, invalidParameter("The request body could not be read: %v.", err))
		return
	}
	out, err := handler(s, r.Context(), r.Host, body)
	if err != nil {
		s.fail(w, op, err)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		s.fail(w, op, &apiError{code: "InternalError", query: "InternalError", message: err.Error(), status: 500, server: true})
		return
	}
	s.log.Debug("sqslocal: request", "operation", op)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// fail writes err as SQS writes errors in the JSON protocol: the shape in
// __type, and the query-compatible code in x-amzn-query-error.
func (s *Server) fail(w http.ResponseWriter, op string, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{code: "InternalError", query: "InternalError", message: err.Error(), status: 500, server: true}
	}
	status := e.status
	if status == 0 {
		status = http.StatusBadRequest
	}
	fault := "Sender"
	if e.server {
		fault = "Receiver"
	}
	s.log.Debug("sqslocal: error", "operation", op, "code", e.code, "message", e.message)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-query-error", e.query+";"+fault)
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.message})
	_, _ = w.Write(b)
}

// decode unmarshals a request body into in.
func decode(body []byte, in any) error {
	if len(body) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, in); err != nil {
		return invalidParameter("The request body is not a valid request: %v.", err)
	}
	return nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// url is the URL of the queue name as reached through host.
func (s *Server) url(host, name string) string {
	return "http://" + host + "/" + s.account + "/" + name
}

// arn is the ARN of the queue name.
func (s *Server) arn(name string) string {
	return "arn:aws:sqs:" + s.region + ":" + s.account + ":" + name
}

// lookup returns the queue a QueueUrl names (its last path segment, as SQS
// reads it). The caller holds s.mu.
func (s *Server) lookup(queueURL string) (*queue, error) {
	if queueURL == "" {
		return nil, missingParameter("QueueUrl")
	}
	name := queueURL[strings.LastIndexByte(queueURL, '/')+1:]
	q, ok := s.queues[name]
	if !ok {
		return nil, noQueue()
	}
	q.expire(time.Now())
	return q, nil
}

// byARN returns the queue with arn, or nil. The caller holds s.mu.
func (s *Server) byARN(arn string) *queue {
	for _, q := range s.queues {
		if q.arn == arn {
			return q
		}
	}
	return nil
}

func (s *Server) createQueue(_ context.Context, host string, body []byte) (any, error) {
	var in struct {
		QueueName  string
		Attributes map[string]string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if !validName.MatchString(in.QueueName) {
		return nil, invalidParameter("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length.")
	}
	attrs := defaultAttributes()
	if err := attrs.set(in.Attributes); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.queues[in.QueueName]; ok {
		existing := q.attrs.values()
		for k, v := range attrs.values() {
			if _, given := in.Attributes[k]; given && existing[k] != v {
				return nil, &apiError{code: "QueueNameExists", query: "QueueAlreadyExists",
					message: "A queue already exists with the same name and a different value for attribute " + k + "."}
			}
		}
		return map[string]string{"QueueUrl": s.url(host, in.QueueName)}, nil
	}
	now := time.Now()
	s.queues[in.QueueName] = &queue{
		name: in.QueueName, arn: s.arn(in.QueueName), created: now, modified: now,
		attrs: attrs, wake: make(chan struct{}),
	}
	return map[string]string{"QueueUrl": s.url(host, in.QueueName)}, nil
}

func (s *Server) deleteQueue(_ context.Context, _ string, body []byte) (any, error) {
	var in struct{ QueueUrl string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	delete(s.queues, q.name)
	q.notify()
	return struct{}{}, nil
}

func (s *Server) getQueueURL(_ context.Context, host string, body []byte) (any, error) {
	var in struct{ QueueName string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.queues[in.QueueName]; !ok {
		return nil, noQueue()
	}
	return map[string]string{"QueueUrl": s.url(host, in.QueueName)}, nil
}

func (s *Server) listQueues(_ context.Context, host string, body []byte) (any, error) {
	var in struct {
		QueueNamePrefix string
		MaxResults      int
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var urls []string
	for name := range s.queues {
		if strings.HasPrefix(name, in.QueueNamePrefix) {
			urls = append(urls, s.url(host, name))
		}
	}
	sort.Strings(urls)
	if in.MaxResults > 0 && len(urls) > in.MaxResults {
		urls = urls[:in.MaxResults]
	}
	if len(urls) == 0 {
		return struct{}{}, nil
	}
	return map[string][]string{"QueueUrls": urls}, nil
}

func (s *Server) getQueueAttributes(_ context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl       string
		AttributeNames []string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	visible, inFlight, delayed := q.counts(now)
	all := q.attrs.values()
	all["QueueArn"] = q.arn
	all["ApproximateNumberOfMessages"] = strconv.Itoa(visible)
	all["ApproximateNumberOfMessagesNotVisible"] = strconv.Itoa(inFlight)
	all["ApproximateNumberOfMessagesDelayed"] = strconv.Itoa(delayed)
	all["CreatedTimestamp"] = strconv.FormatInt(q.created.Unix(), 10)
	all["LastModifiedTimestamp"] = strconv.FormatInt(q.modified.Unix(), 10)
	out := map[string]string{}
	for _, name := range in.AttributeNames {
		if name == "All" {
			out = all
			break
		}
		if v, ok := all[name]; ok {
			out[name] = v
		}
	}
	return map[string]map[string]string{"Attributes": out}, nil
}

func (s *Server) setQueueAttributes(_ context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl   string
		Attributes map[string]string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	attrs := q.attrs
	attrs.other = map[string]string{}
	for k, v := range q.attrs.other {
		attrs.other[k] = v
	}
	if err := attrs.set(in.Attributes); err != nil {
		return nil, err
	}
	q.attrs = attrs
	q.modified = time.Now()
	return struct{}{}, nil
}

func (s *Server) purgeQueue(_ context.Context, _ string, body []byte) (any, error) {
	var in struct{ QueueUrl string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	q.msgs = nil
	return struct{}{}, nil
}

func (s *Server) listDeadLetterSourceQueues(_ context.Context, host string, body []byte) (any, error) {
	var in struct{ QueueUrl string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dlq, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	urls := []string{}
	for name, q := range s.queues {
		if q.attrs.redrive != nil && q.attrs.redrive.DeadLetterTargetArn == dlq.arn {
			urls = append(urls, s.url(host, name))
		}
	}
	sort.Strings(urls)
	return map[string][]string{"queueUrls": urls}, nil
}

// checkBody validates a message body against q's limits.
func checkBody(q *queue, body string) error {
	switch {
	case body == "":
		return missingParameter("MessageBody")
	case len(body) > q.attrs.maxSize:
		return invalidParameter("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.attrs.maxSize)
	case !validBody(body):
		return &apiError{code: "InvalidMessageContents", query: "InvalidMessageContents",
			message: "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF."}
	}
	return nil
}

// delayOf is a message's delay: its own DelaySeconds, else the queue's.
func delayOf(q *queue, delay *int) (int, error) {
	if delay == nil {
		return q.attrs.delay, nil
	}
	if *delay < 0 || *delay > maxDelaySeconds {
		return 0, invalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: must be between 0 and %d, if provided.", *delay, maxDelaySeconds)
	}
	return *delay, nil
}

// sendEntry is a message to send, in SendMessage or SendMessageBatch.
type sendEntry struct {
	Id                      string
	MessageBody             string
	DelaySeconds            *int
	MessageAttributes       map[string]json.RawMessage
	MessageSystemAttributes map[string]json.RawMessage
	MessageGroupId          string
	MessageDeduplicationId  string
}

// enqueue validates e and appends its message to q. The caller holds s.mu.
func enqueue(q *queue, e sendEntry, now time.Time) (*message, error) {
	if err := checkBody(q, e.MessageBody); err != nil {
		return nil, err
	}
	if len(e.MessageAttributes) > 0 || len(e.MessageSystemAttributes) > 0 || e.MessageGroupId != "" || e.MessageDeduplicationId != "" {
		return nil, &apiError{code: "UnsupportedOperation", query: "AWS.SimpleQueueService.UnsupportedOperation",
			message: "This emulator does not support message attributes, message groups or deduplication IDs."}
	}
	delay, err := delayOf(q, e.DelaySeconds)
	if err != nil {
		return nil, err
	}
	m := newMessage(e.MessageBody, now, delay)
	q.msgs = append(q.msgs, m)
	q.notify()
	return m, nil
}

func (s *Server) sendMessage(_ context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl string
		sendEntry
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	m, err := enqueue(q, in.sendEntry, time.Now())
	if err != nil {
		return nil, err
	}
	return map[string]string{"MessageId": m.id, "MD5OfMessageBody": m.md5}, nil
}

// batchFailure is a failed entry of a batch.
type batchFailure struct {
	Id          string
	SenderFault bool
	Code        string
	Message     string
}

// checkBatch validates a batch's entry IDs.
func checkBatch(ids []string) error {
	if len(ids) == 0 {
		return &apiError{code: "EmptyBatchRequest", query: "AWS.SimpleQueueService.EmptyBatchRequest",
			message: "There should be at least one entry in the request."}
	}
	if len(ids) > maxBatchEntries {
		return &apiError{code: "TooManyEntriesInBatchRequest", query: "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
			message: fmt.Sprintf("Maximum number of entries per request are %d. You have sent %d.", maxBatchEntries, len(ids))}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !validName.MatchString(id) {
			return &apiError{code: "InvalidBatchEntryId", query: "AWS.SimpleQueueService.InvalidBatchEntryId",
				message: "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."}
		}
		if seen[id] {
			return &apiError{code: "BatchEntryIdsNotDistinct", query: "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
				message: "Id " + id + " repeated."}
		}
		seen[id] = true
	}
	return nil
}

// failure is the batch failure of entry id for err.
func failure(id string, err error) batchFailure {
	var e *apiError
	if errors.As(err, &e) {
		return batchFailure{Id: id, SenderFault: !e.server, Code: e.code, Message: e.message}
	}
	return batchFailure{Id: id, Code: "InternalError", Message: err.Error()}
}

func (s *Server) sendMessageBatch(_ context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl string
		Entries  []sendEntry
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	total := 0
	for i, e := range in.Entries {
		ids[i] = e.Id
		total += len(e.MessageBody)
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	if total > maxMessageSize {
		return nil, &apiError{code: "BatchRequestTooLong", query: "AWS.SimpleQueueService.BatchRequestTooLong",
			message: fmt.Sprintf("Batch requests cannot be longer than %d bytes.", maxMessageSize)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	type success struct{ Id, MessageId, MD5OfMessageBody string }
	out := struct {
		Successful []success
		Failed     []batchFailure
	}{Successful: []success{}, Failed: []batchFailure{}}
	now := time.Now()
	for _, e := range in.Entries {
		m, err := enqueue(q, e, now)
		if err != nil {
			out.Failed = append(out.Failed, failure(e.Id, err))
			continue
		}
		out.Successful = append(out.Successful, success{Id: e.Id, MessageId: m.id, MD5OfMessageBody: m.md5})
	}
	return out, nil
}

// received is a message as ReceiveMessage returns it.
type received struct {
	MessageId     string
	ReceiptHandle string
	MD5OfBody     string
	Body          string
	Attributes    map[string]string `json:",omitempty"`
}

// systemAttributes are the message attributes ReceiveMessage can return.
var systemAttributes = []string{"SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp"}

func (s *Server) receiveMessage(ctx context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl                    string
		AttributeNames              []string
		MessageSystemAttributeNames []string
		MaxNumberOfMessages         *int
		VisibilityTimeout           *int
		WaitTimeSeconds             *int
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	limit := 1
	if in.MaxNumberOfMessages != nil {
		limit = *in.MaxNumberOfMessages
	}
	if limit < 1 || limit > maxBatchEntries {
		return nil, invalidParameter("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and %d, if provided.", limit, maxBatchEntries)
	}
	if in.VisibilityTimeout != nil && (*in.VisibilityTimeout < 0 || *in.VisibilityTimeout > maxVisibilityTimeout) {
		return nil, invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d, if provided.", *in.VisibilityTimeout, maxVisibilityTimeout)
	}
	if in.WaitTimeSeconds != nil && (*in.WaitTimeSeconds < 0 || *in.WaitTimeSeconds > maxWaitTimeSeconds) {
		return nil, invalidParameter("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= %d, if provided.", *in.WaitTimeSeconds, maxWaitTimeSeconds)
	}
	wanted := map[string]bool{}
	for _, n := range append(in.AttributeNames, in.MessageSystemAttributeNames...) {
		if n == "All" {
			for _, a := range systemAttributes {
				wanted[a] = true
			}
		}
		wanted[n] = true
	}

	s.mu.Lock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	wait := q.attrs.wait
	if in.WaitTimeSeconds != nil {
		wait = *in.WaitTimeSeconds
	}
	s.mu.Unlock()
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		s.mu.Lock()
		q, err := s.lookup(in.QueueUrl)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		now := time.Now()
		msgs := s.take(q, limit, in.VisibilityTimeout, wanted, now)
		next, wake := q.nextVisible(now), q.wake
		s.mu.Unlock()
		if len(msgs) > 0 || !now.Before(deadline) {
			if len(msgs) == 0 {
				return struct{}{}, nil
			}
			return map[string][]received{"Messages": msgs}, nil
		}
		until := deadline
		if !next.IsZero() && next.Before(until) {
			until = next
		}
		timer := time.NewTimer(until.Sub(now))
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return struct{}{}, nil
		}
		timer.Stop()
	}
}

// take receives up to limit visible messages of q at now, moving to the
// dead-letter queue those that have been received maxReceiveCount times
// already, as SQS does when one is about to be received once more. The
// caller holds s.mu.
func (s *Server) take(q *queue, limit int, visibility *int, wanted map[string]bool, now time.Time) []received {
	timeout := q.attrs.visibility
	if visibility != nil {
		timeout = *visibility
	}
	var out []received
	for _, m := range append([]*message(nil), q.msgs...) {
		if len(out) == limit {
			break
		}
		if m.visibleAt.After(now) {
			continue
		}
		if p := q.attrs.redrive; p != nil && m.receives >= p.MaxReceiveCount {
			if dlq := s.byARN(p.DeadLetterTargetArn); dlq != nil && dlq != q {
				q.remove(m.id)
				moved := *m
				moved.receives, moved.firstReceive, moved.receipt, moved.visibleAt = 0, time.Time{}, "", now
				dlq.msgs = append(dlq.msgs, &moved)
				dlq.notify()
				s.log.Debug("sqslocal: message moved to the dead-letter queue", "queue", q.name, "dlq", dlq.name, "message_id", m.id, "receives", m.receives)
				continue
			}
		}
		m.receives++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.receipt = receipt(q.name, m.id)
		m.visibleAt = now.Add(time.Duration(timeout) * time.Second)
		r := received{MessageId: m.id, ReceiptHandle: m.receipt, MD5OfBody: m.md5, Body: m.body}
		attrs := map[string]string{
			"SenderId":                         s.account,
			"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
			"ApproximateReceiveCount":          strconv.Itoa(m.receives),
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		}
		for k, v := range attrs {
			if wanted[k] {
				if r.Attributes == nil {
					r.Attributes = map[string]string{}
				}
				r.Attributes[k] = v
			}
		}
		out = append(out, r)
	}
	return out
}

// inFlight returns the message a receipt handle names on q. stale is set
// when the message exists but was received again since. The caller holds
// s.mu.
func inFlight(q *queue, handle string) (m *message, stale bool, err error) {
	name, id, ok := parseReceipt(handle)
	if !ok || name != q.name {
		return nil, false, &apiError{code: "ReceiptHandleIsInvalid", query: "ReceiptHandleIsInvalid",
			message: "The input receipt handle \"" + handle + "\" is not a valid receipt handle."}
	}
	m = q.find(id)
	if m == nil {
		return nil, false, nil
	}
	return m, m.receipt != handle, nil
}

// deleteOne deletes the message of handle: a stale handle or a message
// already gone is a success that deletes nothing, as in SQS.
func deleteOne(q *queue, handle string) error {
	if handle == "" {
		return missingParameter("ReceiptHandle")
	}
	m, stale, err := inFlight(q, handle)
	if err != nil || m == nil || stale {
		return err
	}
	q.remove(m.id)
	return nil
}

func (s *Server) deleteMessage(_ context.Context, _ string, body []byte) (any, error) {
	var in struct{ QueueUrl, ReceiptHandle string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := deleteOne(q, in.ReceiptHandle); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (s *Server) deleteMessageBatch(_ context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl string
		Entries  []struct{ Id, ReceiptHandle string }
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.Id
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	type success struct{ Id string }
	out := struct {
		Successful []success
		Failed     []batchFailure
	}{Successful: []success{}, Failed: []batchFailure{}}
	for _, e := range in.Entries {
		if err := deleteOne(q, e.ReceiptHandle); err != nil {
			out.Failed = append(out.Failed, failure(e.Id, err))
			continue
		}
		out.Successful = append(out.Successful, success{Id: e.Id})
	}
	return out, nil
}

// changeOne sets the visibility timeout of the in-flight message of handle.
func changeOne(q *queue, handle string, timeout *int) error {
	if handle == "" {
		return missingParameter("ReceiptHandle")
	}
	if timeout == nil {
		return missingParameter("VisibilityTimeout")
	}
	if *timeout < 0 || *timeout > maxVisibilityTimeout {
		return invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d.", *timeout, maxVisibilityTimeout)
	}
	now := time.Now()
	m, stale, err := inFlight(q, handle)
	switch {
	case err != nil:
		return err
	case m == nil || stale:
		return &apiError{code: "ReceiptHandleIsInvalid", query: "ReceiptHandleIsInvalid",
			message: "The receipt handle has expired or the message was deleted."}
	case !m.inFlight(now):
		return &apiError{code: "MessageNotInflight", query: "AWS.SimpleQueueService.MessageNotInflight",
			message: "The message referred to isn't in flight."}
	}
	m.visibleAt = now.Add(time.Duration(*timeout) * time.Second)
	q.notify()
	return nil
}

func (s *Server) changeMessageVisibility(_ context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl, ReceiptHandle string
		VisibilityTimeout       *int
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := changeOne(q, in.ReceiptHandle, in.VisibilityTimeout); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (s *Server) changeMessageVisibilityBatch(_ context.Context, _ string, body []byte) (any, error) {
	var in struct {
		QueueUrl string
		Entries  []struct {
			Id, ReceiptHandle string
			VisibilityTimeout *int
		}
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.Id
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	type success struct{ Id string }
	out := struct {
		Successful []success
		Failed     []batchFailure
	}{Successful: []success{}, Failed: []batchFailure{}}
	for _, e := range in.Entries {
		if err := changeOne(q, e.ReceiptHandle, e.VisibilityTimeout); err != nil {
			out.Failed = append(out.Failed, failure(e.Id, err))
			continue
		}
		out.Successful = append(out.Successful, success{Id: e.Id})
	}
	return out, nil
}
