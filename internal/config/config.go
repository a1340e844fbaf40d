package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by FromEnv. The tables' variables follow a
// rule instead (see Table).
const (
	EnvRetention       = "ONCE_RETENTION"
	EnvLease           = "ONCE_LEASE"
	EnvFaultInjection  = "ONCE_FAULT_INJECTION"
	EnvProviderURL     = "ONCE_PROVIDER_URL"
	EnvProviderTimeout = "ONCE_PROVIDER_TIMEOUT"
	EnvProviderSettle  = "ONCE_PROVIDER_SETTLE"
	EnvProviderAuth    = "ONCE_PROVIDER_AUTH"
	// EnvProviderKeyRetention is how long the payment provider remembers an
	// idempotency key (see Config.ProviderKeyRetention).
	EnvProviderKeyRetention = "ONCE_PROVIDER_KEY_RETENTION"
	EnvMailURL              = "ONCE_MAIL_URL"
	EnvMailAuth             = "ONCE_MAIL_AUTH"
	EnvDynamoDBEndpoint     = "DYNAMODB_ENDPOINT"
	EnvRegion               = "AWS_REGION"
	EnvLogLevel             = "LOG_LEVEL"
	// The recovery checks' delay queue and its dead-letter queue, the
	// worker's retry queue and its dead-letter queue: a queue name (resolved
	// with GetQueueUrl) or a queue URL (what template.yaml passes).
	EnvCheckQueue       = "ONCE_CHECK_QUEUE"
	EnvCheckDLQ         = "ONCE_CHECK_DLQ"
	EnvWorkerRetryQueue = "ONCE_WORKER_RETRY_QUEUE"
	EnvWorkerRetryDLQ   = "ONCE_WORKER_RETRY_DLQ"
	// The receipts' retry queue (the receipts function sends a receipt
	// whose mail failed to it; the resender takes it from there) and its
	// dead-letter queue, where a receipt ends after ONCE_RECEIPT_ATTEMPTS.
	EnvReceiptRetryQueue = "ONCE_RECEIPT_RETRY_QUEUE"
	EnvReceiptRetryDLQ   = "ONCE_RECEIPT_RETRY_DLQ"
	// EnvReceiptAttempts bounds the sends tried for one receipt.
	EnvReceiptAttempts = "ONCE_RECEIPT_ATTEMPTS"
	// EnvWorkerRetryWindow bounds how long the worker retries a payment
	// whose provider call keeps failing transiently.
	EnvWorkerRetryWindow = "ONCE_WORKER_RETRY_WINDOW"
	// EnvWorkerLookUpHorizon bounds how long, from the end of a payment's
	// retry window, the retrier looks its charge up again (and settles it
	// again) while the look-up or the settle fails; and how long, from the
	// first of a run of failed reads of a payment, it reads it again.
	EnvWorkerLookUpHorizon = "ONCE_WORKER_LOOKUP_HORIZON"
	EnvSQSEndpoint         = "SQS_ENDPOINT"
)

// Defaults applied by FromEnv to unset variables.
const (
	DefaultCheckQueue       = "once-check"
	DefaultCheckDLQ         = "once-check-dlq"
	DefaultWorkerRetryQueue = "once-worker-retry"
	DefaultWorkerRetryDLQ   = "once-worker-retry-dlq"
	// DefaultWorkerRetryWindow outlasts most provider outages: a payment
	// whose charge keeps failing transiently is retried for this long after
	// its creation, then settled failed (provider_unavailable).
	DefaultWorkerRetryWindow = 6 * time.Hour
	// DefaultWorkerLookUpHorizon: a provider (or payments table) outage at
	// the end of a payment's retry window is outlasted for a day before the
	// retry message fails towards its dead-letter queue.
	DefaultWorkerLookUpHorizon = 24 * time.Hour
	// MinWorkerLookUpHorizon is the least ONCE_WORKER_LOOKUP_HORIZON: SQS's
	// longest DelaySeconds (15 minutes), which the look-ups' backoff (from
	// 1s, doubling) reaches after about 17 minutes. A shorter horizon ends
	// the look-ups before their backoff has grown, and a provider blip of a
	// few minutes at the window's end would dead-letter the message.
	MinWorkerLookUpHorizon = 15 * time.Minute
	// MaxWorkerLookUpHorizon is the most ONCE_WORKER_LOOKUP_HORIZON: 14
	// days, SQS's longest MessageRetentionPeriod (the retry dead-letter
	// queue's). The horizon counts from the end of the retry window
	// (ONCE_WORKER_RETRY_WINDOW, plus ONCE_PROVIDER_SETTLE): a payment whose
	// charge cannot be looked up is dead-lettered, and alarmed, that long
	// after its window; longer, it would stay pending, its look-ups retried
	// silently, past what any queue of the stack keeps a message.
	MaxWorkerLookUpHorizon = 14 * 24 * time.Hour
	DefaultRetention       = 24 * time.Hour
	DefaultLease           = 30 * time.Second
	// MinRetention is the least ONCE_RETENTION (which must also be at least
	// ONCE_LEASE). A record moved to UNKNOWN gets the retention from then on
	// as its expiry, which should outlive the reconciler's retries: its
	// stream mapping retries a change for up to an hour
	// (MaximumRecordAgeInSeconds, 3600, in template.yaml; internal/deploytest
	// holds every mapping of the idempotency table's stream to it), and the
	// reconciler cannot prove "not charged" before ONCE_PROVIDER_SETTLE has
	// passed (so the retention is at least that too). The store's TTL no
	// longer deletes an UNKNOWN record (it carries no TTL attribute), but an
	// item written UNKNOWN before that carries its expiry as its TTL, and
	// deleted while the reconciler works on it, its key would be free until
	// the sweeper restored it.
	MinRetention = time.Hour
	// DefaultProviderTimeout bounds one call to the payment provider. It is
	// well under DefaultLease, so a request that times out still holds its
	// lease when it records the ambiguous outcome.
	DefaultProviderTimeout = 5 * time.Second
	// DefaultProviderSettle is how long after a call the provider may still
	// apply it, its client gone (the simulator: 30 s at most).
	DefaultProviderSettle = 30 * time.Second
	// DefaultProviderKeyRetention is Stripe's: it prunes idempotency keys
	// once they are at least 24 hours old.
	DefaultProviderKeyRetention = 24 * time.Hour
	// ProviderKeyMargin is the part of ONCE_PROVIDER_KEY_RETENTION that
	// the orders flow leaves unused (orders.KeyRetentionMargin, the same
	// hour: internal/reconciler's test holds the two equal). The least
	// ONCE_PROVIDER_KEY_RETENTION is ONCE_LEASE + ONCE_PROVIDER_SETTLE +
	// MinRetention (the reconciler's stream retries of a change, an hour) +
	// this margin: what an order abandoned at its first point takes to be
	// resumed with no operator (its lease run out, its recovery check, the
	// reconciler retrying while the provider is down), with the margin
	// still left; a shorter one would send orders that a normal resume
	// finishes to an operator.
	ProviderKeyMargin = time.Hour
)

// Defaults of the receipts' retries.
const (
	DefaultReceiptRetryQueue = "once-receipt-retry"
	DefaultReceiptRetryDLQ   = "once-receipt-retry-dlq"
	// DefaultReceiptAttempts: with delays doubling from 1s up to SQS's 15
	// minutes, half of each random, the last attempt comes 2.5 to 5 hours
	// after the first.
	DefaultReceiptAttempts = 30
	// MaxReceiptAttempts bounds ONCE_RECEIPT_ATTEMPTS.
	MaxReceiptAttempts = 1000
)

// How the functions authenticate to the payment provider
// (ONCE_PROVIDER_AUTH) and to the mail API (ONCE_MAIL_AUTH).
const (
	// ProviderAuthNone sends plain requests (the default): a provider of
	// its own authentication, or the devstack's simulator on 127.0.0.1.
	ProviderAuthNone = "none"
	// ProviderAuthIAM signs every request with SigV4 for the service
	// "lambda", with the function's own credentials: the provider simulator
	// behind a function URL whose AuthType is AWS_IAM.
	ProviderAuthIAM = "aws_iam"
)

// Config is the parsed configuration.
type Config struct {
	// getenv reads the tables' variables (Table); nil reads nothing, so
	// that every table has its default name.
	getenv func(string) string
	// Retention is how long a completed (or UNKNOWN) idempotency record is
	// kept: at least MinRetention, Lease and ProviderSettle.
	Retention time.Duration
	// Lease is how long a reservation is held before it counts as abandoned.
	Lease time.Duration
	// FaultInjection enables the Once-Fault request header.
	FaultInjection bool
	// DynamoDBEndpoint overrides the DynamoDB endpoint; empty means AWS.
	DynamoDBEndpoint string
	// Region is the AWS region, AWS_REGION as given. Empty leaves it to
	// each client (dynamoclient.Config): dynamoclient.LocalRegion at an
	// emulator's endpoint (DynamoDB Local, LocalStack, the devstack's SQS),
	// else the SDK's own sources, and an error naming AWS_REGION when they
	// name none; so an AWS endpoint (a VPC endpoint) is never signed for a
	// region that is not its own.
	Region string
	// LogLevel is the minimum level logged.
	LogLevel slog.Level
	// ProviderURL is the payment provider's base URL; empty when unset.
	ProviderURL string
	// ProviderTimeout bounds one call to the payment provider.
	ProviderTimeout time.Duration
	// ProviderSettle bounds how long after a call the provider may still
	// apply it, its client having given up: only a look-up after that which
	// finds nothing proves that nothing happened (at least ProviderTimeout).
	ProviderSettle time.Duration
	// ProviderKeyRetention is how long the provider remembers an
	// idempotency key, and answers a call repeated under it with what the
	// first did: an order resumed later than that, less ProviderKeyMargin,
	// is not charged again but left to an operator (orders.ErrKeyRetention).
	// At least Lease + ProviderSettle + MinRetention + ProviderKeyMargin.
	ProviderKeyRetention time.Duration
	// ProviderAuth is how calls to the provider are authenticated:
	// ProviderAuthNone or ProviderAuthIAM.
	ProviderAuth string
	// CheckQueue and CheckDLQ are the recovery checks' delay queue and its
	// dead-letter queue; WorkerRetryQueue and WorkerRetryDLQ the worker's.
	// Each is a queue name or a queue URL.
	CheckQueue       string
	CheckDLQ         string
	WorkerRetryQueue string
	WorkerRetryDLQ   string
	// WorkerRetryWindow is how long after its creation a payment whose
	// charge fails transiently is retried.
	WorkerRetryWindow time.Duration
	// WorkerLookUpHorizon is how long after the first look-up of a
	// payment's charge at the end of its retry window the look-up, and the
	// settle on its answer, are made again while they fail; then the retry
	// message fails towards its dead-letter queue (MinWorkerLookUpHorizon
	// to MaxWorkerLookUpHorizon). It bounds a run of failed reads of the
	// payment the same way, from the run's first.
	WorkerLookUpHorizon time.Duration
	// ReceiptRetryQueue and ReceiptRetryDLQ are the receipts' retry queue
	// and its dead-letter queue (a queue name or a queue URL).
	ReceiptRetryQueue string
	ReceiptRetryDLQ   string
	// ReceiptAttempts is how many sends of one receipt are tried, at least
	// 2: the first from the outbox stream, the rest from the retry queue.
	ReceiptAttempts int
	// SQSEndpoint overrides the SQS endpoint; empty means AWS.
	SQSEndpoint string
	// MailURL is the mail API's base URL (the receipts sender's); empty when
	// unset.
	MailURL string
	// MailAuth is how calls to the mail API are authenticated:
	// ProviderAuthNone or ProviderAuthIAM (the simulator's function URL).
	MailAuth string
}

// queueName is SQS's rule for (standard) queue names.
var queueName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,80}$`)

// FromEnv parses the configuration from getenv (os.Getenv in production). It
// returns every problem found, joined.
func FromEnv(getenv func(string) string) (Config, error) {
	var errs []error
	bad := func(name, value, reason string) {
		errs = append(errs, fmt.Errorf("config: %s=%q: %s", name, value, reason))
	}
	str := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	duration := func(name string, def time.Duration) time.Duration {
		v := str(name, "")
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad(name, v, "not a Go duration (e.g. 24h, 30s)")
		case d <= 0:
			bad(name, v, "must be positive")
		}
		return d
	}
	count := func(name string, def, least, most int) int {
		v := str(name, "")
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < least || n > most {
			bad(name, v, fmt.Sprintf("not a whole number from %d to %d", least, most))
		}
		return n
	}
	queue := func(name, def string) string {
		v := str(name, def)
		if queueName.MatchString(v) {
			return v
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(name, v, "neither an SQS queue name (1-80 characters of a-z A-Z 0-9 _ -) nor an absolute http(s) queue URL")
		}
		return v
	}
	endpoint := func(name string) string {
		v := str(name, "")
		if v == "" {
			return ""
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(name, v, "not an absolute http(s) URL")
		}
		return v
	}

	c := Config{
		getenv:           getenv,
		Retention:        duration(EnvRetention, DefaultRetention),
		Lease:            duration(EnvLease, DefaultLease),
		DynamoDBEndpoint: endpoint(EnvDynamoDBEndpoint),
		Region:           str(EnvRegion, ""),
		ProviderURL:      endpoint(EnvProviderURL),
		ProviderTimeout:  duration(EnvProviderTimeout, DefaultProviderTimeout),
		ProviderSettle:   duration(EnvProviderSettle, 0),

		ProviderKeyRetention: duration(EnvProviderKeyRetention, DefaultProviderKeyRetention),

		CheckQueue:          queue(EnvCheckQueue, DefaultCheckQueue),
		CheckDLQ:            queue(EnvCheckDLQ, DefaultCheckDLQ),
		WorkerRetryQueue:    queue(EnvWorkerRetryQueue, DefaultWorkerRetryQueue),
		WorkerRetryDLQ:      queue(EnvWorkerRetryDLQ, DefaultWorkerRetryDLQ),
		WorkerRetryWindow:   duration(EnvWorkerRetryWindow, DefaultWorkerRetryWindow),
		WorkerLookUpHorizon: duration(EnvWorkerLookUpHorizon, DefaultWorkerLookUpHorizon),
		ReceiptRetryQueue:   queue(EnvReceiptRetryQueue, DefaultReceiptRetryQueue),
		ReceiptRetryDLQ:     queue(EnvReceiptRetryDLQ, DefaultReceiptRetryDLQ),
		ReceiptAttempts:     count(EnvReceiptAttempts, DefaultReceiptAttempts, 2, MaxReceiptAttempts),
		SQSEndpoint:         endpoint(EnvSQSEndpoint),
		MailURL:             endpoint(EnvMailURL),
	}
	if c.ProviderSettle == 0 { // unset: the default, and never less than the call's own timeout
		c.ProviderSettle = max(DefaultProviderSettle, c.ProviderTimeout)
	}
	if c.ProviderSettle > 0 && c.ProviderTimeout > 0 && c.ProviderSettle < c.ProviderTimeout {
		bad(EnvProviderSettle, c.ProviderSettle.String(), "must be at least "+EnvProviderTimeout+" ("+c.ProviderTimeout.String()+"): a call can land until it times out")
	}
	if c.Lease > 0 && c.ProviderTimeout > 0 && c.ProviderTimeout >= c.Lease {
		bad(EnvProviderTimeout, c.ProviderTimeout.String(), "must be shorter than "+EnvLease+" ("+c.Lease.String()+"), or a timed-out request would lose its lease before recording the unknown outcome")
	}
	if floor := max(MinRetention, c.Lease, c.ProviderSettle); c.Retention > 0 && c.Retention < floor {
		bad(EnvRetention, c.Retention.String(), "must be at least "+floor.String()+", the longest of "+MinRetention.String()+
			" (the reconciler's retries of an UNKNOWN record), "+EnvLease+" ("+c.Lease.String()+") and "+
			EnvProviderSettle+" ("+c.ProviderSettle.String()+", until which an UNKNOWN record's call may still land)"+
			": a completed record expired sooner counts as absent, and a retry would run its request again; "+
			"an UNKNOWN one written with a TTL attribute (before UNKNOWN records lost it) could be deleted by TTL while the reconciler works on it")
	}
	if floor := c.Lease + c.ProviderSettle + MinRetention + ProviderKeyMargin; c.Lease > 0 && c.ProviderSettle > 0 && c.ProviderKeyRetention > 0 && c.ProviderKeyRetention < floor {
		bad(EnvProviderKeyRetention, c.ProviderKeyRetention.String(), "must be at least "+floor.String()+": "+EnvLease+" ("+c.Lease.String()+") + "+
			EnvProviderSettle+" ("+c.ProviderSettle.String()+") + "+MinRetention.String()+" (the reconciler's retries) + "+ProviderKeyMargin.String()+
			" (the margin the orders flow keeps under it), or orders that a normal resume finishes would be left to an operator, never charged")
	}
	switch h := c.WorkerLookUpHorizon; {
	case h > 0 && h < MinWorkerLookUpHorizon:
		bad(EnvWorkerLookUpHorizon, h.String(), "must be at least "+MinWorkerLookUpHorizon.String()+
			" (SQS's longest message delay): a shorter horizon ends the look-ups before their backoff has grown, and a brief provider outage would dead-letter the payment's retry")
	case h > MaxWorkerLookUpHorizon:
		bad(EnvWorkerLookUpHorizon, h.String(), "must be at most "+MaxWorkerLookUpHorizon.String()+
			" (14 days, SQS's longest message retention, the retry dead-letter queue's): past it a payment would stay pending, its look-ups retried silently, longer than any queue of the stack keeps a message")
	}
	auth := func(name string) string {
		switch v := str(name, ProviderAuthNone); strings.ToLower(v) {
		case ProviderAuthNone, ProviderAuthIAM:
			return strings.ToLower(v)
		default:
			bad(name, v, `must be "`+ProviderAuthNone+`" or "`+ProviderAuthIAM+`"`)
			return ""
		}
	}
	c.ProviderAuth = auth(EnvProviderAuth)
	c.MailAuth = auth(EnvMailAuth)
	switch v := str(EnvFaultInjection, ""); strings.ToLower(v) {
	case "", "0", "false":
	case "1", "true":
		c.FaultInjection = true
	default:
		bad(EnvFaultInjection, v, `must be "1", "true", "0", "false" or unset`)
	}
	if v := str(EnvLogLevel, ""); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			bad(EnvLogLevel, v, "must be debug, info, warn or error")
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}
