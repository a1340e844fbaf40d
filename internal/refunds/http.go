package refunds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// Routes of the refunds endpoints.
const (
	RouteCreate = "POST /v1/refunds"
	RouteGet    = "GET /v1/refunds/{id}"
)

// Provider refunds charges and looks refunds up; *provider.Client is one.
type Provider interface {
	// Refund refunds req under the idempotency key. It returns the
	// succeeded refund, or an error that wraps provider.ErrNotRefunded or
	// provider.ErrOutcomeUnknown, matches provider.ErrRejected, or is
	// another error for a call that was wrong.
	Refund(ctx context.Context, key string, req provider.RefundRequest) (provider.Refund, error)
	// LookupRefund returns the refund made under key, or an error wrapping
	// provider.ErrNoRefund when there is none. Any other error means the
	// provider could not tell.
	LookupRefund(ctx context.Context, key string) (provider.Refund, error)
}

// Config is what the refunds endpoints need.
type Config struct {
	// Tables names the refunds and payments tables.
	Tables Tables
	// DB reads them; *dynamodb.Client is one.
	DB payments.Client
	// Provider refunds. Without one, POST answers a valid request 503
	// provider_unavailable, reserving nothing.
	Provider Provider
	// Timeout bounds one provider call (none but the provider client's own
	// when zero); it must be shorter than the lease.
	Timeout time.Duration
}

// Routes returns POST /v1/refunds in External mode (its resolver looks the
// refund up at the provider: NewResolver) and GET /v1/refunds/{id}.
func Routes(mw *idempotency.Middleware, cfg Config) []httpapi.Route {
	h := handler{cfg: cfg, payments: payments.NewTable(cfg.DB, cfg.Tables.Payments)}
	return []httpapi.Route{
		{Pattern: RouteCreate, Handler: mw.External(RouteCreate, http.HandlerFunc(h.create), NewResolver(cfg.Tables, cfg.Provider))},
		{Pattern: RouteGet, Handler: http.HandlerFunc(h.get)},
	}
}

type handler struct {
	cfg      Config
	payments *payments.Table
}

// create serves POST /v1/refunds inside the idempotency middleware: the
// hold is taken with the reservation (Begin), the payment read once for
// the provider's charge and the amount held, the provider called under
// the forward key, and the outcome recorded with its effects.
func (h handler) create(w http.ResponseWriter, r *http.Request) {
	req, ok := httpapi.DecodeJSON(w, r, Decode)
	if !ok {
		return
	}
	if h.cfg.Provider == nil {
		httpapi.WriteError(w, r, ErrProviderUnavailable)
		return
	}
	key, _ := idempotency.KeyOf(r)
	call, ok := idempotency.Begin(w, r, h.cfg.Tables.holds(key, req)...)
	if !ok {
		return
	}
	// A 5xx from here on releases the reservation and gives the hold back.
	call.AddReleaseEffect(h.cfg.Tables.release(key, req.Payment))
	start := time.Now()
	p, err := h.payments.Get(r.Context(), key.Tenant, req.Payment)
	httpapi.NoteStoreCall(r, time.Since(start))
	if err != nil && !errors.Is(err, idempotency.ErrUnavailable) {
		// The hold was just taken: the payment cannot be missing.
		err = fmt.Errorf("refunds: the payment held cannot be read: %v", err)
	}
	if err != nil {
		httpapi.WriteError(w, r, err) // 5xx: the release gives the hold back
		return
	}
	amount, held := p.Holds[key.Hash]
	if !held {
		httpapi.WriteError(w, r, fmt.Errorf("refunds: payment %s holds nothing for the key", p.ID))
		return
	}
	res, err := h.refund(r, call.ForwardKey(), provider.RefundRequest{
		Charge: p.ProviderChargeID, Amount: amount, Reason: req.Reason, Metadata: req.Metadata,
	})
	fault.Check(r.Context(), fault.AfterProviderCall)
	if answer := Answer(err); answer != nil {
		switch {
		case errors.Is(answer, ErrOutcomeUnknown):
			// The refund may exist: the record goes to UNKNOWN, the hold
			// stays until the reconciler knows, and this 504 is not stored.
			call.Unknown()
		case errors.Is(answer, ErrProviderRejected):
			// Final, and nothing was refunded: the 422 is stored with the
			// hold given back.
			call.AddEffect(h.cfg.Tables.release(key, req.Payment))
		}
		// Otherwise nothing was refunded (503) or something else went
		// wrong (500): the engine releases the key of a 5xx, with the
		// release effect.
		httpapi.WriteError(w, r, answer)
		return
	}
	if res.Amount != amount || !strings.EqualFold(res.Currency, p.Currency) || res.Charge != p.ProviderChargeID {
		// Unreachable with a well-behaved provider. Something was refunded
		// that this request cannot answer for: leave the record UNKNOWN,
		// where the reconciler fails on it too and its alarm fires.
		call.Unknown()
		httpapi.WriteError(w, r, fmt.Errorf("%w: refunds: the provider refunded %d %s of %s, the request held %d %s of %s",
			ErrOutcomeUnknown, res.Amount, res.Currency, res.Charge, amount, p.Currency, p.ProviderChargeID))
		return
	}
	ref, resp, err := outcome(call.Record(), res)
	if err != nil {
		call.Unknown()
		httpapi.WriteError(w, r, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err))
		return
	}
	for _, e := range h.cfg.Tables.completion(key, ref) {
		call.AddEffect(e)
	}
	httpapi.WriteResponse(w, resp)
}

// refund calls the provider, bounded by the timeout, and notes the call for
// the request's log line.
func (h handler) refund(r *http.Request, key string, req provider.RefundRequest) (provider.Refund, error) {
	ctx := r.Context()
	if h.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.cfg.Timeout)
		defer cancel()
	}
	start := time.Now()
	res, err := h.cfg.Provider.Refund(ctx, key, req)
	httpapi.NoteCall(r, time.Since(start))
	return res, err
}

// get serves GET /v1/refunds/{id}: another tenant's refund does not exist.
func (h handler) get(w http.ResponseWriter, r *http.Request) {
	httpapi.NoteRead(r)
	tenant, ok := httpapi.Tenant(r)
	if !ok {
		httpapi.WriteError(w, r, idempotency.ErrNoTenant)
		return
	}
	id := r.PathValue("id")
	if !ValidID(id) {
		httpapi.WriteError(w, r, httpapi.ErrNotFound)
		return
	}
	start := time.Now()
	out, err := h.cfg.DB.GetItem(r.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(h.cfg.Tables.Refunds),
		Key:            map[string]types.AttributeValue{KeyAttr: &types.AttributeValueMemberS{Value: PK(tenant, id)}},
		ConsistentRead: aws.Bool(true),
	})
	httpapi.NoteStoreCall(r, time.Since(start))
	var ref Refund
	switch {
	case err != nil:
		err = fmt.Errorf("refunds: get %s: %w: %w", id, idempotency.ErrUnavailable, err)
	case len(out.Item) == 0:
		err = httpapi.ErrNotFound
	default:
		err = attributevalue.UnmarshalMap(out.Item, &ref)
	}
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, r, http.StatusOK, ref, func(hd http.Header) { hd.Set("Cache-Control", "no-store") })
}

// NewResolver returns the Resolver of POST /v1/refunds: it looks the
// request's refund up at the provider under the record's forward key. A
// refund found completes the record with Response's answer and the effects
// the live request would have written; none releases the key and gives the
// hold back.
func NewResolver(t Tables, p Provider) idempotency.Resolver {
	return idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		if p == nil {
			return idempotency.Resolution{}, errors.New("refunds: no provider to look the refund up")
		}
		req, err := Decode(rec.Request)
		if err != nil {
			return idempotency.Resolution{}, fmt.Errorf("refunds: the recorded request: %w: %w", idempotency.ErrUnresolvable, err)
		}
		res, err := p.LookupRefund(ctx, rec.ForwardKey())
		switch {
		case errors.Is(err, provider.ErrNoRefund):
			return idempotency.Resolution{Effects: []idempotency.Effect{t.release(rec.Key, req.Payment)}}, nil
		case err != nil:
			return idempotency.Resolution{}, fmt.Errorf("refunds: look up %s: %w", rec.Key.Short(), err)
		}
		ref, resp, err := outcome(rec, res)
		if err != nil {
			return idempotency.Resolution{}, err
		}
		return idempotency.Resolution{Response: &resp, Effects: t.completion(rec.Key, ref)}, nil
	})
}

// Response is the complete answer to POST /v1/refunds (status, headers,
// body) for the request recorded in rec once the provider's refund res is
// known: 201, Location, and the refund (New, from rec.Key, rec.Request and
// rec.CreatedAt, and res). The handler sends exactly this answer, and the
// Resolver, which learns res later, stores it: both are byte for byte the
// same. It fails when res is not a succeeded refund of the request's
// amount (when it names one), or rec lacks its request or creation time.
func Response(rec idempotency.Record, res provider.Refund) (idempotency.Response, error) {
	_, resp, err := outcome(rec, res)
	return resp, err
}

// outcome is the refund and the answer of Response.
func outcome(rec idempotency.Record, res provider.Refund) (Refund, idempotency.Response, error) {
	if rec.CreatedAt.IsZero() {
		return Refund{}, idempotency.Response{}, errors.New("refunds: response: the record has no creation time")
	}
	req, err := Decode(rec.Request)
	if err != nil {
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: the recorded request: %w", err)
	}
	switch {
	case res.Status != provider.StatusSucceeded:
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: refund %s has status %q", res.ID, res.Status)
	case res.Amount <= 0 || req.Amount > 0 && res.Amount != req.Amount:
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: refund %s is of %d, the request of %d", res.ID, res.Amount, req.Amount)
	}
	ref := New(rec.Key, req, res, rec.CreatedAt)
	body, err := json.Marshal(ref)
	if err != nil {
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: %w", err)
	}
	return ref, idempotency.Response{
		Status: http.StatusCreated,
		Header: map[string]string{"Content-Type": "application/json", "Location": Location(ref.ID)},
		Body:   body,
	}, nil
}
