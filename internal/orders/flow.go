package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// Routes of the orders endpoints (served by package ordershttp):
// RouteCreate is the route its idempotency records and its Resolver are
// keyed by.
const (
	RouteCreate = "POST /v1/orders"
	RouteGet    = "GET /v1/orders/{id}"
)

// Charger charges the payment provider; *provider.Client is one.
type Charger interface {
	// Charge charges req under the idempotency key. It returns the succeeded
	// charge, or an error that is a *provider.DeclinedError, wraps
	// provider.ErrNotCharged or provider.ErrOutcomeUnknown, matches
	// provider.ErrRejected, or is another error for a call that was wrong.
	Charge(ctx context.Context, key string, req provider.ChargeRequest) (provider.Charge, error)
}

// The data the phases record (idempotency.Steps.Data).
const (
	dataOrder   = "order"   // the order's ID (order_created)
	dataCreated = "created" // its creation, unix seconds (order_created)
	dataCharge  = "charge"  // the provider's charge (charge_created)
	dataStatus  = "status"  // paid or failed (charge_created)
	dataFailure = "failure" // the decline's code (charge_created)
	dataReceipt = "receipt" // "sent" when the stored order's receipt was (charge_created, re-sent)
)

// Reader reads stored orders; *Table is one.
type Reader interface {
	// Get returns tenant's order id as it stands (a consistent read), or an
	// error wrapping ErrNotFound or idempotency.ErrUnavailable.
	Get(ctx context.Context, tenant, id string) (Order, error)
}

// Flow runs the phases of an order request: the handler (package
// ordershttp) and the Resolver share it, so that a resumed request goes
// through the very code a live one does.
type Flow struct {
	// Provider charges orders.
	Provider Charger
	// Reader reads the order before the phase charge_created calls the
	// provider: an order that already holds the provider's answer (a
	// request re-sent once its record expired names the same order) is not
	// charged again. Required: without it the phase fails, calling nothing.
	Reader Reader
	// Orders and Outbox are the tables of the orders and of their receipt
	// jobs.
	Orders, Outbox string
	// Timeout bounds one provider call (none but the client's own when
	// zero; it must be shorter than the lease). Once the order is read, a
	// request whose deadline leaves the call less than Timeout calls
	// nothing (ErrNoTimeForCall).
	Timeout time.Duration
	// KeyRetention is how long the provider remembers a forwarded key and
	// answers a repeated call with the charge it made (Stripe: 24 hours);
	// zero is for ever (the simulator). The phase charge_created is not run
	// once the request is older than KeyRetention less KeyRetentionMargin
	// (see ErrKeyRetention).
	KeyRetention time.Duration
	// Now is the time the request's age is measured at (time.Now when nil).
	Now func() time.Time
}

// KeyRetentionMargin is how much of Flow.KeyRetention the phase
// charge_created leaves unused (half of it when KeyRetention is shorter
// than two margins). The age it measures is already an overestimate of the
// key's (the first call came after the record was created), so the margin
// covers what it does not: the call's own time on the way to the provider
// (at most the call's timeout, seconds), the difference between this clock
// and the provider's (seconds), and a provider whose retention is not to
// the second (Stripe: keys are pruned "after they're at least 24 hours
// old"). An hour is far more than those: what it costs is only that an
// order resumed in the last hour of the retention goes to an operator
// instead of being charged (config.ProviderKeyMargin is the same hour, in
// the least ONCE_PROVIDER_KEY_RETENTION it accepts).
const KeyRetentionMargin = time.Hour

// ErrKeyRetention: the phase charge_created was to run again (a resumed
// request, or the same request re-sent once its record expired, on an
// order that holds no charge) later than the provider remembers its
// forwarded key (Flow.KeyRetention less KeyRetentionMargin): if the first
// call landed, a call now could charge a second time, so none is made. Nothing can find
// the outcome out: the handler declares it unknown (500 order_needs_review,
// the record left to an operator), and the Resolver returns it wrapped in
// idempotency.ErrUnresolvable (the record left UNKNOWN, counted
// reconcile_unroutable).
var ErrKeyRetention = fmt.Errorf("orders: the provider may have forgotten the order's forwarded key, and a call could charge twice: %w",
	problem.New(http.StatusInternalServerError, "order_needs_review", "Order needs review",
		"The order's charge was started longer ago than the payment provider remembers its idempotency key: "+
			"it may have been charged, and calling the provider again could charge it twice, so it was not. "+
			"The order is left to an operator: retries with the same Idempotency-Key call nothing, and get 409 or this answer again until it is settled."))

// ErrNoTimeForCall: once the phase charge_created has read its order, the
// request's deadline (the function's invocation, live; the reconciler's,
// resumed) leaves the provider call less than Flow.Timeout: a slow read,
// or a slow reservation before it, took the time. A call made then could
// be cut off by the deadline, its outcome unknown and, live, the function
// stopped before it records that (the record waits for its lease to run
// out and the recovery check). Nothing is called: the phase fails as a
// store that did not answer in time does (it wraps
// idempotency.ErrUnavailable), so the handler answers 503
// store_unavailable with the lease given up at order_created, and a retry
// resumes there at once; the reconciler's delivery fails, to be retried.
var ErrNoTimeForCall = fmt.Errorf("orders: once the order is read, the request has less time left than the provider call may take: %w", idempotency.ErrUnavailable)

// ErrDrift: the provider answered with a charge that is not this request's
// (another amount or currency under its forwarded key). Nothing the request
// can answer for: the outcome is left to reconciliation, whose failure on
// the same charge raises the alarm.
var ErrDrift = errors.New("orders: the provider's charge does not match the request")

// Start is what a new request of order o reserves its key with
// (idempotency.BeginAt): the first recovery point, order_created, the data
// every later phase rebuilds o from (its ID and creation time), and the
// order's write, committed with the reservation.
func (f Flow) Start(o Order) (point string, data map[string]string, hold idempotency.Effect, err error) {
	hold, err = upsert(f.Orders, o)
	if err != nil {
		return "", nil, nil, err
	}
	return PointOrderCreated, map[string]string{dataOrder: o.ID, dataCreated: strconv.FormatInt(o.Created, 10)}, hold, nil
}

// Run goes through the phases after s.Point() and returns the answer and
// the effects of the completion (the finished phase's transaction). Its
// errors are the provider's (see Charger), ErrDrift, ErrKeyRetention and
// ErrNoTimeForCall (no call made), the order's read's, and Steps.Advance's (a
// *idempotency.ConflictError: the lease is lost). called, when set, is
// called once the provider has answered, with how long the call took: the
// handler notes the call for the request's log line there, and checks its
// crash point (fault.AfterProviderCall).
func (f Flow) Run(ctx context.Context, s *idempotency.Steps, req Request, called func(time.Duration)) (idempotency.Response, []idempotency.Effect, error) {
	o, err := orderOf(s, req)
	if err != nil {
		return idempotency.Response{}, nil, err
	}
	switch s.Point() {
	case PointOrderCreated:
		answer, effects, done, err := f.charge(ctx, s, o, req, called)
		if err != nil || done {
			return answer, effects, err
		}
		// The phase may have recorded the stored order's creation.
		if o, err = orderOf(s, req); err != nil {
			return idempotency.Response{}, nil, err
		}
	case PointChargeCreated:
	default:
		return idempotency.Response{}, nil, fmt.Errorf("orders: %w: recovery point %q", idempotency.ErrUnresolvable, s.Point())
	}
	return f.finish(s, o)
}

// charge is the phase charge_created: one call to the provider under the
// phase's forwarded key, then its answer recorded on the order with the new
// point. done is set when the request ends without a charge (the provider
// refused the request itself): its answer is final, with effects.
//
// The order is read first. Its ID is derived from the key and the request,
// so a request re-sent with both once its record expired (a new record, a
// new execution) names an order that may already hold the provider's
// answer, under a forwarded key the provider may have forgotten: then no
// call is made, and the phase records the order's answer as if the provider
// had given it (paid or declined with its charge; or, rejected, the final
// rejection). An order holding none is charged, unless it is older than the
// provider's key memory (keyRemembered, measured from the stored order's
// creation, the first request's). The point records the stored order's
// creation, so that the answer is the first request's.
func (f Flow) charge(ctx context.Context, s *idempotency.Steps, o Order, req Request, called func(time.Duration)) (idempotency.Response, []idempotency.Effect, bool, error) {
	if f.Reader == nil {
		return idempotency.Response{}, nil, false, errors.New("orders: no reader to read the order with before its charge")
	}
	stored, err := f.Reader.Get(ctx, o.Tenant, o.ID)
	if errors.Is(err, ErrNotFound) {
		// Written with the reservation, and never deleted: nothing to
		// record a charge on, so none is made.
		return idempotency.Response{}, nil, false, fmt.Errorf("orders: %w: order %s is not stored: %w", idempotency.ErrUnresolvable, o.ID, err)
	}
	if err != nil {
		return idempotency.Response{}, nil, false, fmt.Errorf("orders: read order %s before its charge: %w", o.ID, err)
	}
	created := map[string]string{}
	if stored.Created > 0 && stored.Created < o.Created {
		o.Created = stored.Created
		created[dataCreated] = strconv.FormatInt(stored.Created, 10)
	}
	switch {
	case stored.Charge != "" && (stored.Status == StatusPaid || stored.Status == StatusFailed):
		data := map[string]string{dataCharge: stored.Charge, dataStatus: string(stored.Status)}
		if stored.Status == StatusFailed {
			data[dataFailure] = stored.FailureCode
		}
		if stored.Receipt == ReceiptSent {
			// Its job may be gone (a sent job expires): queued again, it
			// would be sent again.
			data[dataReceipt] = string(ReceiptSent)
		}
		maps.Copy(data, created)
		err := s.Advance(ctx, PointChargeCreated, data, holds(f.Orders, o, stored.Charge))
		return idempotency.Response{}, nil, false, err
	case stored.Status == StatusFailed:
		// Rejected by the provider, finished: no charge exists, and the
		// answer was final.
		return problemResponse(charges.ErrProviderRejected), []idempotency.Effect{rejected(f.Orders, o, stored.FailureCode)}, true, nil
	}
	if err := f.keyRemembered(s, o); err != nil {
		return idempotency.Response{}, nil, false, err
	}
	// Checked after the read, which counts against the same deadline.
	if err := f.timeForCall(ctx); err != nil {
		return idempotency.Response{}, nil, false, err
	}
	cctx := ctx
	if f.Timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, f.Timeout)
		defer cancel()
	}
	start := time.Now()
	c, err := f.Provider.Charge(cctx, s.ForwardKey(PointChargeCreated), providerRequest(req))
	if called != nil {
		called(time.Since(start))
	}
	var declined *provider.DeclinedError
	switch {
	case err == nil:
	case errors.As(err, &declined):
		c = declined.Charge
	case errors.Is(err, provider.ErrRejected):
		resp := problemResponse(charges.ErrProviderRejected)
		return resp, []idempotency.Effect{rejected(f.Orders, o, "provider_rejected")}, true, nil
	default:
		return idempotency.Response{}, nil, false, err
	}
	if c.ID == "" {
		// Nothing to record the order's charge by: an order failed with no
		// charge reads as one the provider rejected (a re-send would answer
		// 422, not this decline's 402).
		return idempotency.Response{}, nil, false, fmt.Errorf("%w: the provider's %s charge has no ID", ErrDrift, c.Status)
	}
	if c.Amount != req.Amount || !strings.EqualFold(c.Currency, req.Currency) {
		return idempotency.Response{}, nil, false, fmt.Errorf("%w: charge %s is of %d %s, the order of %d %s",
			ErrDrift, c.ID, c.Amount, c.Currency, req.Amount, req.Currency)
	}
	status, data := StatusPaid, map[string]string{dataCharge: c.ID, dataStatus: string(StatusPaid)}
	maps.Copy(data, created)
	switch c.Status {
	case provider.StatusSucceeded:
	case provider.StatusFailed:
		status, data[dataStatus], data[dataFailure] = StatusFailed, string(StatusFailed), c.FailureCode
	default:
		return idempotency.Response{}, nil, false, fmt.Errorf("%w: charge %s has status %q", ErrDrift, c.ID, c.Status)
	}
	err = s.Advance(ctx, PointChargeCreated, data, charged(f.Orders, o, status, c.ID, data[dataFailure]))
	return idempotency.Response{}, nil, false, err
}

// timeForCall returns an error wrapping ErrNoTimeForCall when ctx's
// deadline leaves less than f.Timeout for the provider call. Without a
// deadline or a Timeout there is nothing to compare.
func (f Flow) timeForCall(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok || f.Timeout <= 0 {
		return nil
	}
	if left := time.Until(deadline); left < f.Timeout {
		return fmt.Errorf("%w (%v left, the call may take %v)", ErrNoTimeForCall, left.Round(time.Millisecond), f.Timeout)
	}
	return nil
}

// keyRemembered returns an error wrapping ErrKeyRetention when the request
// of s and o is too old for its forwarded key to be still remembered
// (Flow.KeyRetention). Its age is counted from the record's creation or,
// earlier, the order's (o.Created: the stored order's creation, the first
// request's, when it is earlier than the record's data, which a request
// re-sent after its record expired writes anew; taken before the first
// reservation, in whole seconds): a record without a creation time (one
// decoded from an image that lacks it) is measured by the order alone.
func (f Flow) keyRemembered(s *idempotency.Steps, o Order) error {
	if f.KeyRetention <= 0 {
		return nil
	}
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	if age, limit, ok := KeyRemembered(f.KeyRetention, s.Record().CreatedAt, o.Created, now()); !ok {
		return fmt.Errorf("%w: the request is %s old, the provider keeps keys %s (less a margin: %s)",
			ErrKeyRetention, age.Round(time.Second), f.KeyRetention, limit)
	}
	return nil
}

// KeyRemembered says whether the provider, keeping keys for retention
// (zero: for ever), still remembers the forwarded key of an order request
// whose record was created at recordCreated (zero when unknown) and whose
// order at orderCreated (unix seconds: the earliest of the record's data
// and the stored order's): its age, counted from the earlier of the two, is
// below retention less KeyRetentionMargin (half of retention when it is
// shorter than two margins). It returns the age and that limit (zero for
// ever). The phase charge_created calls the provider only while it does
// (ErrKeyRetention); oncectl settle-order settles an order only once it no
// longer does.
func KeyRemembered(retention time.Duration, recordCreated time.Time, orderCreated int64, now time.Time) (age, limit time.Duration, ok bool) {
	since := recordCreated
	if orderCreated > 0 && (since.IsZero() || time.Unix(orderCreated, 0).Before(since)) {
		since = time.Unix(orderCreated, 0)
	}
	if since.IsZero() { // no creation known: as young as can be
		since = now
	}
	age = now.Sub(since)
	if retention <= 0 {
		return age, 0, true
	}
	limit = retention - min(KeyRetentionMargin, retention/2)
	return age, limit, age < limit
}

// finish is the phase finished: the answer to store and the effects stored
// with it (the order complete and, paid, its receipt job, unless the charge
// phase found the receipt sent already: the order re-sent after its record
// expired, whose sent job may have expired too).
func (f Flow) finish(s *idempotency.Steps, o Order) (idempotency.Response, []idempotency.Effect, error) {
	data := s.Data()
	switch Status(data[dataStatus]) {
	case StatusPaid:
		resp, err := paidResponse(o, data[dataCharge])
		if err != nil {
			return idempotency.Response{}, nil, err
		}
		effects := []idempotency.Effect{finished(f.Orders, o, true)}
		if data[dataReceipt] != string(ReceiptSent) {
			job, err := upsert(f.Outbox, NewReceiptJob(o, data[dataCharge]))
			if err != nil {
				return idempotency.Response{}, nil, err
			}
			effects = append(effects, job)
		}
		return resp, effects, nil
	case StatusFailed:
		return problemResponse(charges.ErrDeclined), []idempotency.Effect{finished(f.Orders, o, false)}, nil
	}
	return idempotency.Response{}, nil, fmt.Errorf("orders: %w: the charge phase recorded status %q", idempotency.ErrUnresolvable, data[dataStatus])
}

// orderOf is the order of the request the steps are at: its ID and
// creation time as the first phase recorded them, and req.
func orderOf(s *idempotency.Steps, req Request) (Order, error) {
	data := s.Data()
	created, err := strconv.ParseInt(data[dataCreated], 10, 64)
	if err != nil || !ValidID(data[dataOrder]) {
		return Order{}, fmt.Errorf("orders: %w: the first phase recorded order %q created %q",
			idempotency.ErrUnresolvable, data[dataOrder], data[dataCreated])
	}
	return New(s.Record().Key.Tenant, data[dataOrder], req, time.Unix(created, 0)), nil
}

// paidResponse is the answer to a paid order: 201, Location, the order.
func paidResponse(o Order, charge string) (idempotency.Response, error) {
	desc, md := payments.RenderOptional(o.Description, o.Metadata)
	body, err := json.Marshal(created{
		ID: o.ID, Object: "order", Amount: o.Amount, Currency: o.Currency, Customer: o.Customer, Email: o.Email,
		Description: desc, Metadata: md, Status: StatusPaid, Charge: charge, Receipt: ReceiptQueued, Created: o.Created,
	})
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("orders: render: %w", err)
	}
	return idempotency.Response{
		Status: http.StatusCreated,
		Header: map[string]string{"Content-Type": "application/json", "Location": o.Location()},
		Body:   body,
	}, nil
}

// problemResponse is err's problem as a stored answer.
func problemResponse(err error) idempotency.Response {
	d := problem.For(err)
	return idempotency.Response{Status: d.Status, Header: problem.Renderer{}.Header(d), Body: problem.Renderer{}.Body(d)}
}

func providerRequest(req Request) provider.ChargeRequest {
	return provider.ChargeRequest{
		Amount:      req.Amount,
		Currency:    req.Currency,
		Source:      req.Source,
		Customer:    req.Customer,
		Description: req.Description,
		Metadata:    req.Metadata,
	}
}

// Resolver is the idempotency.Resolver of POST /v1/orders: it resumes the
// request recorded in an UNKNOWN record (abandoned at a recovery point) with
// idempotency.ResumeSteps, through the phases the handler runs (Flow.Run),
// and returns the answer and the completion's effects. It never releases
// the key: the order exists from the first point on.
type Resolver struct {
	store idempotency.Store
	flow  Flow
	now   func() time.Time
}

// NewResolver returns the Resolver that resumes requests on store (the
// idempotency store the middleware writes) through f; now stamps the
// phases, and measures the requests' age when f.Now is nil (time.Now when
// nil).
func NewResolver(store idempotency.Store, f Flow, now func() time.Time) *Resolver {
	if now == nil {
		now = time.Now
	}
	if f.Now == nil {
		f.Now = now
	}
	return &Resolver{store: store, flow: f, now: now}
}

// Resolve resumes rec's request. A provider that cannot answer now is an
// error (the reconciler retries); a record without a recovery point or
// with a request that does not decode is ErrUnresolvable, and so is one
// whose charge is too old to make again (ErrKeyRetention, wrapped too): the
// reconciler leaves it UNKNOWN for an operator.
func (r *Resolver) Resolve(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
	if r.flow.Provider == nil || r.store == nil {
		return idempotency.Resolution{}, errors.New("orders: no provider or store to resume the order with")
	}
	if rec.Point == "" {
		return idempotency.Resolution{}, fmt.Errorf("orders: %w: record %s has no recovery point", idempotency.ErrUnresolvable, rec.Key.Short())
	}
	req, err := Decode(rec.Request)
	if err != nil {
		return idempotency.Resolution{}, fmt.Errorf("orders: %w: the recorded request: %w", idempotency.ErrUnresolvable, err)
	}
	steps := idempotency.ResumeSteps(r.store, rec, r.now)
	resp, effects, err := r.flow.Run(ctx, steps, req, nil)
	if errors.Is(err, ErrKeyRetention) {
		return idempotency.Resolution{}, fmt.Errorf("orders: %w: resume %s at %s: %w", idempotency.ErrUnresolvable, rec.Key.Short(), rec.Point, err)
	}
	if err != nil {
		return idempotency.Resolution{}, fmt.Errorf("orders: resume %s at %s: %w", rec.Key.Short(), rec.Point, err)
	}
	return idempotency.Resolution{Response: &resp, Effects: effects, Steps: steps, FinalPoint: PointFinished}, nil
}

// Recorded returns what the phases of the order request rec recorded: the
// order's ID (order_created) and, once charge_created is committed, the
// provider's charge and the order's status then (paid or failed); empty
// where a phase recorded nothing. oncectl settle-order reads a record
// by it.
func Recorded(rec idempotency.Record) (order, charge string, status Status) {
	return rec.Data[dataOrder], rec.Data[dataCharge], Status(rec.Data[dataStatus])
}

// RecordKeyRemembered is KeyRemembered for the order request rec, whose
// order is stored (the stored order's creation counts when it is earlier
// than the one rec's first phase recorded), measured as the phase
// charge_created measures it. oncectl settle-order reads a record by it.
func RecordKeyRemembered(rec idempotency.Record, stored Order, retention time.Duration, now time.Time) (age, limit time.Duration, ok bool) {
	created, err := strconv.ParseInt(rec.Data[dataCreated], 10, 64)
	if err != nil || created <= 0 || (stored.Created > 0 && stored.Created < created) {
		created = stored.Created
	}
	return KeyRemembered(retention, rec.CreatedAt, created, now)
}
