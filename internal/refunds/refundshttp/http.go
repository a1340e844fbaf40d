package refundshttp

import (
	"context"
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
	"github.com/oncehq/once/internal/refunds"
)

// Config is what the refunds endpoints need.
type Config struct {
	// Tables names the refunds and payments tables.
	Tables refunds.Tables
	// DB reads them; *dynamodb.Client is one.
	DB payments.Client
	// Provider refunds. Without one, POST answers a valid request 503
	// provider_unavailable, reserving nothing.
	Provider refunds.Provider
	// Timeout bounds one provider call (none but the provider client's own
	// when zero); it must be shorter than the lease.
	Timeout time.Duration
}

// Routes returns POST /v1/refunds in External mode (its resolver looks the
// refund up at the provider: refunds.NewResolver) and GET /v1/refunds/{id}.
func Routes(mw *idempotency.Middleware, cfg Config) []httpapi.Route {
	h := handler{cfg: cfg, payments: payments.NewTable(cfg.DB, cfg.Tables.Payments)}
	return []httpapi.Route{
		{Pattern: refunds.RouteCreate, Handler: mw.External(refunds.RouteCreate, http.HandlerFunc(h.create), refunds.NewResolver(cfg.Tables, cfg.Provider))},
		{Pattern: refunds.RouteGet, Handler: http.HandlerFunc(h.get)},
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
	req, ok := httpapi.DecodeJSON(w, r, refunds.Decode)
	if !ok {
		return
	}
	if h.cfg.Provider == nil {
		httpapi.WriteError(w, r, refunds.ErrProviderUnavailable)
		return
	}
	key, _ := idempotency.KeyOf(r)
	call, ok := idempotency.Begin(w, r, h.cfg.Tables.Holds(key, req)...)
	if !ok {
		return
	}
	// A 5xx from here on releases the reservation and gives the hold back.
	call.AddReleaseEffect(h.cfg.Tables.Release(key, req.Payment))
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
	if answer := refunds.Answer(err); answer != nil {
		switch {
		case errors.Is(answer, refunds.ErrOutcomeUnknown):
			// The refund may exist: the record goes to UNKNOWN, the hold
			// stays until the reconciler knows, and this 504 is not stored.
			call.Unknown()
		case errors.Is(answer, refunds.ErrProviderRejected):
			// Final, and nothing was refunded: the 422 is stored with the
			// hold given back.
			call.AddEffect(h.cfg.Tables.Release(key, req.Payment))
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
			refunds.ErrOutcomeUnknown, res.Amount, res.Currency, res.Charge, amount, p.Currency, p.ProviderChargeID))
		return
	}
	ref, resp, err := refunds.Outcome(call.Record(), res)
	if err != nil {
		call.Unknown()
		httpapi.WriteError(w, r, fmt.Errorf("%w: %w", refunds.ErrOutcomeUnknown, err))
		return
	}
	for _, e := range h.cfg.Tables.Completion(key, ref) {
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
	httpapi.ServeGet(w, r, refunds.ValidID, h.read)
}

// read is the tenant's refund id, read consistently.
func (h handler) read(ctx context.Context, tenant, id string) (refunds.Refund, error) {
	out, err := h.cfg.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(h.cfg.Tables.Refunds),
		Key:            map[string]types.AttributeValue{refunds.KeyAttr: &types.AttributeValueMemberS{Value: refunds.PK(tenant, id)}},
		ConsistentRead: aws.Bool(true),
	})
	var ref refunds.Refund
	switch {
	case err != nil:
		err = fmt.Errorf("refunds: get %s: %w: %w", id, idempotency.ErrUnavailable, err)
	case len(out.Item) == 0:
		err = httpapi.ErrNotFound
	default:
		err = attributevalue.UnmarshalMap(out.Item, &ref)
	}
	return ref, err
}
