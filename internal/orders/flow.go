package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
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
)

// flow runs the phases of an order request: the handler and the Resolver
// share it, so that a resumed request goes through the very code a live one
// does.
type flow struct {
	provider Charger
	orders   string // the orders table
	outbox   string // the outbox table
	timeout  time.Duration
}

// errDrift: the provider answered with a charge that is not this request's
// (another amount or currency under its forwarded key). Nothing the request
// can answer for: the outcome is left to reconciliation, whose failure on
// the same charge raises the alarm.
var errDrift = errors.New("orders: the provider's charge does not match the request")

// run goes through the phases after s.Point() and returns the answer and
// the effects of the completion (the finished phase's transaction). Its
// errors are the provider's (see Charger), errDrift, and Steps.Advance's (a
// *idempotency.ConflictError: the lease is lost). note, when set, is told
// how long the provider call took.
func (f flow) run(ctx context.Context, s *idempotency.Steps, req Request, note func(time.Duration)) (idempotency.Response, []idempotency.Effect, error) {
	o, err := orderOf(s, req)
	if err != nil {
		return idempotency.Response{}, nil, err
	}
	switch s.Point() {
	case PointOrderCreated:
		answer, effects, done, err := f.charge(ctx, s, o, req, note)
		if err != nil || done {
			return answer, effects, err
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
func (f flow) charge(ctx context.Context, s *idempotency.Steps, o Order, req Request, note func(time.Duration)) (idempotency.Response, []idempotency.Effect, bool, error) {
	cctx := ctx
	if f.timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	start := time.Now()
	c, err := f.provider.Charge(cctx, s.ForwardKey(PointChargeCreated), providerRequest(req))
	if note != nil {
		note(time.Since(start))
	}
	fault.Check(ctx, fault.AfterProviderCall)
	var declined *provider.DeclinedError
	switch {
	case err == nil:
	case errors.As(err, &declined):
		c = declined.Charge
	case errors.Is(err, provider.ErrRejected):
		resp := problemResponse(charges.ErrProviderRejected)
		return resp, []idempotency.Effect{rejected(f.orders, o, "provider_rejected")}, true, nil
	default:
		return idempotency.Response{}, nil, false, err
	}
	if c.Amount != req.Amount || !strings.EqualFold(c.Currency, req.Currency) {
		return idempotency.Response{}, nil, false, fmt.Errorf("%w: charge %s is of %d %s, the order of %d %s",
			errDrift, c.ID, c.Amount, c.Currency, req.Amount, req.Currency)
	}
	status, data := StatusPaid, map[string]string{dataCharge: c.ID, dataStatus: string(StatusPaid)}
	switch c.Status {
	case provider.StatusSucceeded:
	case provider.StatusFailed:
		status, data[dataStatus], data[dataFailure] = StatusFailed, string(StatusFailed), c.FailureCode
	default:
		return idempotency.Response{}, nil, false, fmt.Errorf("%w: charge %s has status %q", errDrift, c.ID, c.Status)
	}
	err = s.Advance(ctx, PointChargeCreated, data, charged(f.orders, o, status, c.ID, data[dataFailure]))
	return idempotency.Response{}, nil, false, err
}

// finish is the phase finished: the answer to store and the effects stored
// with it (the order complete and, paid, its receipt job).
func (f flow) finish(s *idempotency.Steps, o Order) (idempotency.Response, []idempotency.Effect, error) {
	data := s.Data()
	switch Status(data[dataStatus]) {
	case StatusPaid:
		job, err := upsert(f.outbox, NewReceiptJob(o, data[dataCharge]))
		if err != nil {
			return idempotency.Response{}, nil, err
		}
		resp, err := paidResponse(o, data[dataCharge])
		if err != nil {
			return idempotency.Response{}, nil, err
		}
		return resp, []idempotency.Effect{finished(f.orders, o, true), job}, nil
	case StatusFailed:
		return problemResponse(charges.ErrDeclined), []idempotency.Effect{finished(f.orders, o, false)}, nil
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

// NewResolver returns the Resolver of POST /v1/orders: it resumes the
// request recorded in an UNKNOWN record (abandoned at a recovery point) with
// idempotency.ResumeSteps on store, through the phases the handler runs, and
// returns the answer and the completion's effects. It never releases the
// key: the order exists from the first point on. A provider that cannot
// answer now is an error (the reconciler retries).
func NewResolver(store idempotency.Store, p Charger, orders, outbox string, timeout time.Duration, now func() time.Time) idempotency.Resolver {
	f := flow{provider: p, orders: orders, outbox: outbox, timeout: timeout}
	return idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		if p == nil || store == nil {
			return idempotency.Resolution{}, errors.New("orders: no provider or store to resume the order with")
		}
		if rec.Point == "" {
			return idempotency.Resolution{}, fmt.Errorf("orders: %w: record %s has no recovery point", idempotency.ErrUnresolvable, rec.Key.Short())
		}
		req, err := Decode(rec.Request)
		if err != nil {
			return idempotency.Resolution{}, fmt.Errorf("orders: %w: the recorded request: %w", idempotency.ErrUnresolvable, err)
		}
		steps := idempotency.ResumeSteps(store, rec, now)
		resp, effects, err := f.run(ctx, steps, req, nil)
		if err != nil {
			return idempotency.Resolution{}, fmt.Errorf("orders: resume %s at %s: %w", rec.Key.Short(), rec.Point, err)
		}
		return idempotency.Resolution{Response: &resp, Effects: effects, Steps: steps, FinalPoint: PointFinished}, nil
	})
}
