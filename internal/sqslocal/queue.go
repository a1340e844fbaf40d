package sqslocal

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Attribute limits and defaults, as SQS documents them for standard queues.
const (
	maxDelaySeconds      = 900
	maxVisibilityTimeout = 43200
	maxWaitTimeSeconds   = 20
	maxMessageSize       = 262144
	minMessageSize       = 1024
	minRetention         = 60
	maxRetention         = 1209600
	defaultRetention     = 345600
	defaultVisibility    = 30
	maxBatchEntries      = 10
	maxReceiveCountLimit = 1000
)

// queue is one queue's configuration and messages. Every field is guarded by
// the Server's mutex.
type queue struct {
	name     string
	arn      string
	created  time.Time
	modified time.Time
	attrs    attributes
	// msgs holds the messages not deleted, in the order they were sent (or
	// moved here).
	msgs []*message
	// wake is closed, and replaced, whenever a message may have become
	// receivable: long polls wait on it.
	wake chan struct{}
}

// attributes are a queue's settable attributes.
type attributes struct {
	delay, visibility, retention, maxSize, wait int
	redrive                                     *redrivePolicy
	// other holds the attributes kept and reported but not acted on
	// (SqsManagedSseEnabled, Policy, ...).
	other map[string]string
}

// redrivePolicy is the RedrivePolicy attribute.
type redrivePolicy struct {
	DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

// message is one message in a queue.
type message struct {
	id        string
	body      string
	md5       string
	sent      time.Time
	visibleAt time.Time // the end of its delay or of its visibility timeout
	// receives counts the receives; firstReceive is the first one's time.
	receives     int
	firstReceive time.Time
	// receipt is the handle of the latest receive ("" before the first).
	receipt string
}

// inFlight reports whether m was received and is hidden at now.
func (m *message) inFlight(now time.Time) bool {
	return m.receives > 0 && now.Before(m.visibleAt)
}

// delayed reports whether m was never received and is still delayed at now.
func (m *message) delayed(now time.Time) bool {
	return m.receives == 0 && now.Before(m.visibleAt)
}

// defaultAttributes are a new queue's attributes.
func defaultAttributes() attributes {
	return attributes{visibility: defaultVisibility, retention: defaultRetention, maxSize: maxMessageSize, other: map[string]string{}}
}

// passive are attributes accepted and reported as given, without effect here.
var passive = map[string]bool{
	"Policy": true, "KmsMasterKeyId": true, "KmsDataKeyReusePeriodSeconds": true,
	"SqsManagedSseEnabled": true, "RedriveAllowPolicy": true,
}

// set applies the attributes in, reporting the first invalid one.
func (a *attributes) set(in map[string]string) error {
	for name, v := range in {
		intIn := func(into *int, lo, hi int) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < lo || n > hi {
				return &apiError{code: "InvalidAttributeValue", query: "InvalidAttributeValue",
					message: fmt.Sprintf("Invalid value for the parameter %s: %q is not an integer from %d to %d.", name, v, lo, hi)}
			}
			*into = n
			return nil
		}
		var err error
		switch name {
		case "DelaySeconds":
			err = intIn(&a.delay, 0, maxDelaySeconds)
		case "VisibilityTimeout":
			err = intIn(&a.visibility, 0, maxVisibilityTimeout)
		case "MessageRetentionPeriod":
			err = intIn(&a.retention, minRetention, maxRetention)
		case "MaximumMessageSize":
			err = intIn(&a.maxSize, minMessageSize, maxMessageSize)
		case "ReceiveMessageWaitTimeSeconds":
			err = intIn(&a.wait, 0, maxWaitTimeSeconds)
		case "RedrivePolicy":
			if v == "" {
				a.redrive = nil
				continue
			}
			p, perr := parseRedrive(v)
			if perr != nil {
				return perr
			}
			a.redrive = p
		case "FifoQueue":
			if v != "false" {
				return &apiError{code: "InvalidAttributeValue", query: "InvalidAttributeValue",
					message: "This emulator serves standard queues only."}
			}
		default:
			if !passive[name] {
				return &apiError{code: "InvalidAttributeName", query: "InvalidAttributeName",
					message: fmt.Sprintf("Unknown Attribute %s.", name)}
			}
			a.other[name] = v
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseRedrive parses a RedrivePolicy; maxReceiveCount may be a number or a
// string, as CloudFormation and the console write it.
func parseRedrive(v string) (*redrivePolicy, error) {
	var raw struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	bad := &apiError{code: "InvalidAttributeValue", query: "InvalidAttributeValue",
		message: "Value " + v + " for parameter RedrivePolicy is invalid. Reason: want {\"deadLetterTargetArn\": <queue ARN>, \"maxReceiveCount\": 1-1000}."}
	if err := json.Unmarshal([]byte(v), &raw); err != nil || !strings.HasPrefix(raw.DeadLetterTargetArn, "arn:") {
		return nil, bad
	}
	n, err := strconv.Atoi(strings.Trim(string(raw.MaxReceiveCount), `"`))
	if err != nil || n < 1 || n > maxReceiveCountLimit {
		return nil, bad
	}
	return &redrivePolicy{DeadLetterTargetArn: raw.DeadLetterTargetArn, MaxReceiveCount: n}, nil
}

// values renders a's attributes as GetQueueAttributes reports them.
func (a attributes) values() map[string]string {
	out := map[string]string{
		"DelaySeconds":                  strconv.Itoa(a.delay),
		"VisibilityTimeout":             strconv.Itoa(a.visibility),
		"MessageRetentionPeriod":        strconv.Itoa(a.retention),
		"MaximumMessageSize":            strconv.Itoa(a.maxSize),
		"ReceiveMessageWaitTimeSeconds": strconv.Itoa(a.wait),
	}
	if a.redrive != nil {
		b, _ := json.Marshal(a.redrive)
		out["RedrivePolicy"] = string(b)
	}
	for k, v := range a.other {
		out[k] = v
	}
	return out
}

// notify wakes the long polls waiting on q.
func (q *queue) notify() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// expire drops the messages whose retention has passed at now.
func (q *queue) expire(now time.Time) {
	keep := q.msgs[:0]
	for _, m := range q.msgs {
		if now.Before(m.sent.Add(time.Duration(q.attrs.retention) * time.Second)) {
			keep = append(keep, m)
		}
	}
	clear(q.msgs[len(keep):])
	q.msgs = keep
}

// find returns the message with id, or nil.
func (q *queue) find(id string) *message {
	for _, m := range q.msgs {
		if m.id == id {
			return m
		}
	}
	return nil
}

// remove deletes the message with id.
func (q *queue) remove(id string) {
	for i, m := range q.msgs {
		if m.id == id {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			return
		}
	}
}

// counts returns how many messages are visible, in flight and delayed.
func (q *queue) counts(now time.Time) (visible, inFlight, delayed int) {
	for _, m := range q.msgs {
		switch {
		case m.inFlight(now):
			inFlight++
		case m.delayed(now):
			delayed++
		default:
			visible++
		}
	}
	return visible, inFlight, delayed
}

// nextVisible is the earliest time at which a hidden message becomes
// visible after now, zero when none will.
func (q *queue) nextVisible(now time.Time) time.Time {
	var next time.Time
	for _, m := range q.msgs {
		if m.visibleAt.After(now) && (next.IsZero() || m.visibleAt.Before(next)) {
			next = m.visibleAt
		}
	}
	return next
}

// newMessage returns a message of body sent at now with delay.
func newMessage(body string, now time.Time, delay int) *message {
	sum := md5.Sum([]byte(body))
	return &message{
		id:        newID(),
		body:      body,
		md5:       hex.EncodeToString(sum[:]),
		sent:      now,
		visibleAt: now.Add(time.Duration(delay) * time.Second),
	}
}

// newID returns a random message ID in the UUID form SQS uses.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// receipt returns a new receipt handle for the message id on queue.
func receipt(queue, id string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString([]byte(queue + "\x00" + id + "\x00" + hex.EncodeToString(b[:])))
}

// parseReceipt returns the queue name and message ID of a receipt handle.
func parseReceipt(h string) (queue, id string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return "", "", false
	}
	parts := strings.Split(string(b), "\x00")
	if len(parts) != 3 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// validBody reports whether body holds only the characters SQS accepts:
// #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF.
func validBody(body string) bool {
	for _, r := range body {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}
