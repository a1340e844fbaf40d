package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/abandoned"
	"github.com/oncehq/once/internal/metrics"
)

// The metrics a run emits (EMF, on its Emitter).
const (
	// MetricAbandoned is how many stuck records the run found in its
	// segment, 0 included.
	MetricAbandoned = "abandoned_records"
	// MetricIncomplete is 1 when the run stopped before its segment's end
	// (the page bound or its deadline), else 0.
	MetricIncomplete = "audit_incomplete"
)

// Schedule is the auditor's EventBridge schedule expression in
// template.yaml: every hour at minute 5 (UTC). A scheduled event's time is
// when its rule triggered, within the scheduled minute (AWS's sample has
// seconds, 16:53:06), not when the invocation ran: Lambda's asynchronous
// retries get the same event, so the same time. A run's segment and the
// timestamps of its figures are that time's hour; at minute 5, a run that
// starts late, is retried 1 to 2 minutes later, or reaches CloudWatch Logs
// after a lag still publishes early in its hour. rate(1 hour) would run at
// the deploy time's minute: at xx:58, those figures would come after their
// hour.
const Schedule = "cron(5 * * * ? *)"

// Defaults of Config.
const (
	// Segments is how many segments the table is scanned in, one an hour
	// (Segment: the hour since the epoch mod Segments), so that a record
	// is seen every 23 hours, at the cost of 24/23 full eventually
	// consistent Scans of the table a day.
	//
	// AbandonedRecordsAlarm looks at the 48 most recent hourly periods
	// (two days; CloudWatch allows up to 7 days for hourly periods), and
	// must always hold a sighting while a record is stuck, even when one
	// run is missed (its three asynchronous attempts failed). A record
	// sighted in period p is sighted next in p+Segments, then p+2*Segments;
	// any window of more than 2*Segments periods holds two of its
	// scheduled sightings (the window ending in p+46, before that hour's
	// run has published, still starts at p), one of them if a run is
	// missed, so the alarm stays up. With 24, the window ending in p+48
	// starts at p+1, and one missed run would leave it no sighting. A run
	// stamps its figures with the time it was scheduled at (Audit's at,
	// the event's time, not when it ran; see metrics.Emitter.PutAt), so a
	// run that starts late in its hour, or is retried, still puts its
	// sighting in that hour's period. internal/deploytest's
	// TestDailyAlarms checks the alarm's window is longer than 2*Segments
	// hours.
	Segments = 23
	// MaxPages bounds the pages (up to 1 MB each) one run reads. A
	// segment larger than that (a table over 23 GB or so) needs a larger
	// MaxPages and a longer Timeout, or more Segments (and
	// AbandonedRecordsAlarm's window longer than 2*Segments hours, at most
	// CloudWatch's 7 days: 83 segments at most); AuditIncompleteAlarm says
	// so.
	MaxPages = 1000
	// Margin is how much of its invocation's time a run leaves when it
	// stops reading pages: a page it starts with Margin left ends, read
	// or failed after every retry, within dynamoclient.CallBound of
	// ClientOptions (58 s), leaving time to emit what it counted before
	// Lambda ends the invocation.
	Margin = 60 * time.Second
	// MaxLogged bounds the stuck records a run logs, one Warn line each;
	// past it one Warn line says how many more it found and did not list
	// (oncectl unknown -limit N, N above their count, lists them all: its
	// default -limit is 100), and abandoned_records still counts
	// them all: a fault that left 100,000 records stuck logs 101 lines an
	// hour, not 100,000.
	MaxLogged = 100
)

// Scanner is the DynamoDB call the auditor makes (a *dynamodb.Client).
type Scanner interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Config configures an Auditor.
type Config struct {
	// DB and TableName are the idempotency table.
	DB        Scanner
	TableName string
	// Segments is the Scan's TotalSegments (the package's Segments when 0).
	Segments int
	// MaxPages bounds the pages one run reads (the package's MaxPages when
	// 0); PageItems, when not 0, the items each page evaluates (tests).
	MaxPages  int
	PageItems int32
	// Margin: a run reads no further page with less than this left before
	// its context's deadline (the package's Margin when 0).
	Margin time.Duration
	// MaxLogged bounds the stuck records a run logs a line for (the
	// package's MaxLogged when 0).
	MaxLogged int
	// Logger gets a line per stuck record, up to MaxLogged, and one per
	// run (slog's default when nil); Metrics the EMF metrics (none when
	// nil).
	Logger  *slog.Logger
	Metrics *metrics.Emitter
	// Now is the time the records are judged at (time.Now when nil).
	Now func() time.Time
}

// Auditor counts the stuck records of one segment of the idempotency
// table per run.
type Auditor struct {
	cfg Config
}

// New returns an Auditor, cfg's zero fields set to their defaults; an error
// without a table, or with Segments outside DynamoDB's 1 to 1,000,000.
func New(cfg Config) (*Auditor, error) {
	if cfg.DB == nil || cfg.TableName == "" {
		return nil, errors.New("audit: no idempotency table")
	}
	if cfg.Segments == 0 {
		cfg.Segments = Segments
	}
	if cfg.Segments < 1 || cfg.Segments > 1_000_000 {
		return nil, fmt.Errorf("audit: %d segments, want 1 to 1000000", cfg.Segments)
	}
	if cfg.MaxPages <= 0 {
		cfg.MaxPages = MaxPages
	}
	if cfg.Margin <= 0 {
		cfg.Margin = Margin
	}
	if cfg.MaxLogged <= 0 {
		cfg.MaxLogged = MaxLogged
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Auditor{cfg: cfg}, nil
}

// Segment returns the segment, of segments, that the run scheduled at t
// scans: t's hours since the Unix epoch (floored, negative before 1970),
// modulo segments (never negative).
func Segment(t time.Time, segments int) int {
	secs, n := t.Unix(), int64(segments)
	h := secs / 3600
	if secs%3600 < 0 {
		h-- // floor, not truncation toward zero
	}
	return int((h%n + n) % n)
}

// Result is what one run did.
type Result struct {
	// Segment of Segments is the segment it scanned.
	Segment, Segments int
	// Pages, Scanned and Matched are the pages read, the items they
	// evaluated and those the filter returned.
	Pages, Scanned, Matched int
	// Stuck is how many stuck records it found (abandoned_records).
	Stuck int
	// Complete: it read its segment to the end.
	Complete bool
}

// Handle is the Lambda handler: it audits the segment of ev's time (the
// scheduled event's; now when it has none) and returns Audit's error.
func (a *Auditor) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	_, err := a.Audit(ctx, ev.Time)
	return err
}

// Audit scans the segment of the run scheduled at at, counts its stuck
// records (abandoned.Record.Stuck at Now), logs the first MaxLogged of
// them at Warn (then one Warn line with how many more it found), and emits
// abandoned_records and audit_incomplete, stamped at at. It returns the
// Scan's error, and the invocation fails and is retried: failing on the
// first page, having emitted nothing; failing later, having emitted what
// it counted (a lower bound) as abandoned_records and audit_incomplete 1,
// so that its sighting and its incompleteness are not lost if every retry
// fails too.
func (a *Auditor) Audit(ctx context.Context, at time.Time) (Result, error) {
	now := a.cfg.Now()
	if at.IsZero() {
		at = now
	}
	res := Result{Segment: Segment(at, a.cfg.Segments), Segments: a.cfg.Segments}
	log := a.cfg.Logger.With("segment", res.Segment, "segments", res.Segments)
	filter, names, values := abandoned.Filter("", now)
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(a.cfg.TableName),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		Segment:                   aws.Int32(int32(res.Segment)),
		TotalSegments:             aws.Int32(int32(res.Segments)),
	}
	if a.cfg.PageItems > 0 {
		in.Limit = aws.Int32(a.cfg.PageItems)
	}
	stopped := ""
	var scanErr error
	for {
		if res.Pages == a.cfg.MaxPages {
			stopped = fmt.Sprintf("page bound (%d pages)", a.cfg.MaxPages)
			break
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < a.cfg.Margin {
			stopped = fmt.Sprintf("deadline (less than %s left)", a.cfg.Margin)
			break
		}
		out, err := a.cfg.DB.Scan(ctx, in)
		if err != nil {
			scanErr = fmt.Errorf("audit: scan %s segment %d of %d: %w", a.cfg.TableName, res.Segment, res.Segments, err)
			if res.Pages == 0 {
				return res, scanErr
			}
			stopped = fmt.Sprintf("scan error after %d pages: %v", res.Pages, err)
			break
		}
		res.Pages++
		res.Scanned += int(out.ScannedCount)
		res.Matched += len(out.Items)
		for _, item := range out.Items {
			rec, _, err := abandoned.FromItem(item, now)
			if err != nil {
				// Matched by the filter (UNKNOWN, or an External
				// reservation past its lease) and unreadable: nothing
				// will recover it either (oncectl unknown skips it,
				// naming it the same way).
				res.Stuck++
				if res.Stuck <= a.cfg.MaxLogged {
					log.Warn("abandoned record", "record", abandoned.ItemID(item), "kind", abandoned.KindUnreadable, "error", err.Error())
				}
				continue
			}
			if rec.Stuck(now) {
				res.Stuck++
				if res.Stuck <= a.cfg.MaxLogged {
					logStuck(log, rec, now)
				}
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			res.Complete = true
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if more := res.Stuck - a.cfg.MaxLogged; more > 0 {
		log.Warn("abandoned records not listed: run oncectl unknown -limit N, N above their count (its default is 100), to list them all",
			"listed", a.cfg.MaxLogged, "not_listed", more)
	}
	a.cfg.Metrics.PutAt(MetricAbandoned, int64(res.Stuck), at)
	incomplete := int64(0)
	attrs := []any{"pages", res.Pages, "scanned", res.Scanned, "matched", res.Matched, "abandoned", res.Stuck}
	if !res.Complete {
		incomplete = 1
		log.Warn("audit incomplete: the segment's records not read are not counted", append(attrs, "stopped_by", stopped)...)
	} else {
		log.Info("audit done", attrs...)
	}
	a.cfg.Metrics.PutAt(MetricIncomplete, incomplete, at)
	return res, scanErr
}

// logStuck logs rec, stuck at now, by its ID: never a raw key (the record
// holds its hash only) or a body.
func logStuck(log *slog.Logger, rec abandoned.Record, now time.Time) {
	attrs := []any{
		"record", rec.Key.ID(), "tenant", rec.Key.Tenant, "route", rec.Route,
		"status", string(rec.Status), "kind", rec.Kind(),
		"expires_at", rec.ExpiresAt.UTC().Format(time.RFC3339),
	}
	if since, from := abandoned.Age(rec.Record); !since.IsZero() {
		attrs = append(attrs, "age", now.Sub(since).Round(time.Second).String(), "age_from", from)
	}
	log.Warn("abandoned record", attrs...)
}
