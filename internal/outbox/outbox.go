// Package outbox is the format of the outbox table: the receipt job an
// order's completion writes (in the transaction that stores its answer) and
// the receipts function consumes from the table's stream, and the
// attributes of the order item that a sent receipt is recorded on. The
// writer (internal/orders) and the consumer (internal/receipts) share it and
// nothing else, so that neither links the other's code.
package outbox

// KeyAttr is the partition key attribute of the outbox table (and of the
// orders table).
const KeyAttr = "pk"

// TTLAttr is the outbox table's TTL attribute (Job.ExpiresAt), set once a
// job is sent.
const TTLAttr = "expires_at"

// KindReceipt is the kind of a receipt job: the receipts function's stream
// filter selects the INSERTs of items of this kind.
const KindReceipt = "receipt"

// JobIDPrefix starts every receipt job's ID; 24 characters of lower-case
// base32 (an order ID's) follow.
const JobIDPrefix = "rcpt_"

// jobIDLength is the length of a job ID after its prefix.
const jobIDLength = 24

// ValidJobID reports whether id has the shape of a receipt job's ID.
func ValidJobID(id string) bool {
	if len(id) != len(JobIDPrefix)+jobIDLength || id[:len(JobIDPrefix)] != JobIDPrefix {
		return false
	}
	for i := len(JobIDPrefix); i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// JobPK is the partition key of tenant's job id: "<tenant>#<id>".
func JobPK(tenant, id string) string { return tenant + "#" + id }

// State is where a receipt job stands. The order's completion writes it
// queued; the receipts function moves it.
type State string

// The states of a receipt job.
const (
	// Queued: written by the order's completion, not tried yet.
	Queued State = "queued"
	// Sending: claimed by a sender (Claim, until ClaimUntil) that is
	// sending it, or died doing so.
	Sending State = "sending"
	// Sent: sent, and recorded on the order.
	Sent State = "sent"
	// Failed: the last attempt provably sent nothing (or the mail API
	// refused the message); a retry tries again.
	Failed State = "failed"
)

// Attributes of the order item that the receipts function writes once the
// receipt is sent: receipt becomes ReceiptSent and receipt_sent_at the time
// (unix seconds).
const (
	OrderReceipt       = "receipt"
	OrderReceiptSentAt = "receipt_sent_at"
	ReceiptSent        = "sent"
)

// Job is a receipt job as stored in the outbox table: the message to send,
// and its delivery state, which is also the sender's deduplication record
// (one item per job, keyed by the job's ID).
type Job struct {
	// PK is "<tenant>#<id>".
	PK   string `dynamodbav:"pk"`
	Kind string `dynamodbav:"kind"`
	// ID is the job's ID (one job per order: "rcpt_" and the order ID's
	// characters).
	ID     string `dynamodbav:"id"`
	Tenant string `dynamodbav:"tenant"`
	// Order is the order's ID, OrderPK its item's key in the orders table.
	Order   string `dynamodbav:"order"`
	OrderPK string `dynamodbav:"order_pk"`
	To      string `dynamodbav:"to"`
	Subject string `dynamodbav:"subject"`
	Text    string `dynamodbav:"text"`
	// Created is when the order was created, in unix seconds.
	Created int64 `dynamodbav:"created"`
	State   State `dynamodbav:"state"`
	// Attempts counts the claims (sends tried).
	Attempts int `dynamodbav:"attempts"`
	// Claim is the token of the sender holding the job, ClaimUntil (unix
	// milliseconds) when its claim runs out.
	Claim      string `dynamodbav:"claim,omitempty"`
	ClaimUntil int64  `dynamodbav:"claim_until,omitempty"`
	// LastError says why the last attempt failed.
	LastError string `dynamodbav:"last_error,omitempty"`
	// SentAt is when the message was sent, in unix seconds; Message is the
	// mail API's ID of it.
	SentAt  int64  `dynamodbav:"sent_at,omitempty"`
	Message string `dynamodbav:"message,omitempty"`
	// ExpiresAt is the outbox table's TTL (TTLAttr, unix seconds), set
	// once sent.
	ExpiresAt int64 `dynamodbav:"expires_at,omitempty"`
}
