package modelcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/refunds"
)

// endpoint is one idempotent endpoint under test. Adding an endpoint is
// adding an entry to endpoints.
type endpoint struct {
	// name is the endpoint's name in tags and reports.
	name string
	// path is where clients POST.
	path string
	// external is true when a request holds a reservation while it calls
	// another system (External mode), false when its effect commits with
	// its answer in one transaction (Atomic mode).
	external bool
	// resumes is true when a request runs as recovery points (a multi-step
	// request): the same request that finds its reservation abandoned at a
	// point takes it over and resumes it, and answers as the first would
	// have (not as a replay).
	resumes bool
	// faults are the Once-Fault points a request may carry.
	faults []string
	// body returns the body of a new request variant, amount in minor units
	// (variants of one key differ by amount). The checker adds the tags to
	// its metadata.
	body func(r *rand.Rand, amount int64) map[string]any
	// finals are the statuses of the final answers a valid request may get
	// (besides 409, 422 idempotency_key_reused and 5xx); any other (400,
	// 404, ...) is a failure of the harness or of the contract.
	finals []int
	// codes are the problem codes a final 4xx answer may carry: another
	// (a provider's refusal where the endpoint should have refused first)
	// is a failure.
	codes []string
	// effectful reports whether a final answer with this status means that
	// the request's effect exists.
	effectful func(status int) bool
	// effects counts the effects present at the endpoint's systems, per tag:
	// one per request whose effect exists, more for a duplicate.
	effects func(ctx context.Context, s systems) (map[tag]int, error)
	// setup, when set, readies the planned variants of the endpoint before
	// the history starts, through the stack (refunds: the succeeded payments
	// they refund).
	setup func(ctx context.Context, c *checker, vs []planned) error
	// pending, when set, lists what the endpoint still does in the
	// background once its keys are settled (orders: receipts not sent yet):
	// the run waits until there is none.
	pending func(ctx context.Context, s systems) ([]string, error)
	// audit, when set, holds the endpoint's systems to each other once the
	// system is quiet, beyond the count of effects (refunds: the refunds
	// table and the payments' refunded amounts agree with the provider;
	// orders: one charge per charged order, one receipt per paid one).
	audit func(ctx context.Context, s systems, run string) ([]string, error)
}

// expects reports whether a final answer with status and problem code is
// one the endpoint may give.
func (ep *endpoint) expects(status int, code string) bool {
	if !slices.Contains(ep.finals, status) {
		return false
	}
	return status < 400 || ep.codes == nil || slices.Contains(ep.codes, code)
}

// planned is a variant of a key of tenant, as setup readies it.
type planned struct {
	tenant string
	v      *variant
}

// systems are where effects are counted: DynamoDB Local directly (not
// through the fault proxy) and the stack's tables.
type systems struct {
	db  *dynamodb.Client
	cfg config.Config
}

// Source tokens of the provider simulator; tokUnknown is one it refuses
// (422 provider_rejected, nothing charged).
const (
	tokVisa        = "tok_visa"
	tokDeclined    = "tok_chargeDeclined"
	tokUnavailable = "tok_unavailable"
	tokTimeout     = "tok_timeout"
	tokSlow        = "tok_slow"
	tokUnknown     = "tok_mastercard"
	// tokFlaky: 503 (nothing charged) for the simulator's FlakyFor (3s)
	// after it first sees the key, then charged.
	tokFlaky = "tok_flaky"
)

// weighted picks one of choices with probability proportional to its weight.
type weighted []struct {
	value  string
	weight int
}

func (w weighted) pick(r *rand.Rand) string {
	total := 0
	for _, c := range w {
		total += c.weight
	}
	n := r.IntN(total)
	for _, c := range w {
		if n -= c.weight; n < 0 {
			return c.value
		}
	}
	return w[len(w)-1].value
}

var (
	chargeSources = weighted{
		{tokVisa, 30}, {tokDeclined, 14}, {tokUnavailable, 14},
		{tokTimeout, 12}, {tokSlow, 12}, {tokUnknown, 6},
	}
	// The worker charges payments in the background; sources that time out
	// would only keep it retrying.
	paymentSources = weighted{{tokVisa, 3}, {tokDeclined, 1}}
	currencies     = weighted{{"EUR", 1}, {"usd", 1}, {"GBP", 1}}
	allFaults      = []string{fault.AfterReserve, fault.AfterProviderCall, fault.AfterComplete}
)

var (
	// A refund does as the source of the payment it refunds says: a
	// tenant's refunds share one payment, charged with one of these.
	refundSources = weighted{
		{simulator.TokenVisa, 6}, {simulator.TokenRefundUnavailable, 2},
		{simulator.TokenRefundTimeout, 2}, {simulator.TokenRefundSlow, 2},
	}
	// An order whose provider stays down (tokUnavailable) keeps its order,
	// UNKNOWN, until the provider comes back (the reconciler resumes it
	// then): it would never be quiet. tokFlaky is the provider down for a
	// while: the order's first calls get 503, the key is given up at
	// order_created, and a retry or the recovery resumes it and charges
	// once the provider is back. Every source ends.
	orderSources = weighted{
		{tokVisa, 30}, {tokDeclined, 14}, {tokFlaky, 12}, {tokTimeout, 12}, {tokSlow, 12}, {tokUnknown, 6},
	}
	// The crash points of an order: after each recovery point, and after
	// the provider call.
	orderFaults = []string{
		idempotency.PointAfter(orders.PointOrderCreated), fault.AfterProviderCall,
		idempotency.PointAfter(orders.PointChargeCreated), idempotency.PointAfter(orders.PointFinished),
	}
)

// baseBody is what payments and charges requests share.
func baseBody(r *rand.Rand, amount int64, source string) map[string]any {
	b := map[string]any{
		"amount":   amount,
		"currency": currencies.pick(r),
		"customer": fmt.Sprintf("cus_%d", r.IntN(1000)),
		"source":   source,
	}
	if r.IntN(2) == 0 {
		b["description"] = fmt.Sprintf("order %d", r.IntN(100000))
	}
	return b
}

var endpoints = []*endpoint{
	{
		name:     "payments",
		path:     "/v1/payments",
		external: false,
		faults:   allFaults,
		body: func(r *rand.Rand, amount int64) map[string]any {
			return baseBody(r, amount, paymentSources.pick(r))
		},
		finals:    []int{http.StatusCreated},
		effectful: func(status int) bool { return status == http.StatusCreated },
		effects: func(ctx context.Context, s systems) (map[tag]int, error) {
			return taggedItems(ctx, s.db, s.cfg.Table("PaymentsTable"), nil)
		},
	},
	{
		name:     "charges",
		path:     "/v1/charges",
		external: true,
		faults:   allFaults,
		body: func(r *rand.Rand, amount int64) map[string]any {
			return baseBody(r, amount, chargeSources.pick(r))
		},
		// 402 card_declined; 422 provider_rejected, for tokUnknown.
		finals: []int{http.StatusCreated, http.StatusPaymentRequired, http.StatusUnprocessableEntity},
		codes:  []string{"card_declined", "provider_rejected"},
		effectful: func(status int) bool {
			return status == http.StatusCreated || status == http.StatusPaymentRequired
		},
		effects: func(ctx context.Context, s systems) (map[tag]int, error) {
			return providerCharges(ctx, s, "charges")
		},
	},
	{
		name:     "refunds",
		path:     "/v1/refunds",
		external: true,
		faults:   allFaults,
		// setup charges one payment per tenant, which the tenant's
		// refunds share, and names it in their bodies. One refund in five
		// takes all that is left.
		body: func(r *rand.Rand, amount int64) map[string]any {
			b := map[string]any{"payment": ""}
			if r.IntN(5) > 0 {
				b["amount"] = amount
			}
			if r.IntN(2) == 0 {
				b["reason"] = refunds.Reasons[r.IntN(len(refunds.Reasons))]
			}
			return b
		},
		// 201; 400 amount_exceeds_refundable when the refunds of the
		// payment, in flight or done, leave too little: the hold's
		// condition must refuse it before the provider does (whose
		// refusal would be a 422 provider_rejected).
		finals:    []int{http.StatusCreated, http.StatusBadRequest},
		codes:     []string{"amount_exceeds_refundable"},
		effectful: func(status int) bool { return status == http.StatusCreated },
		effects: func(ctx context.Context, s systems) (map[tag]int, error) {
			return taggedItems(ctx, s.db, s.cfg.Table("ProviderTable"), func(item map[string]types.AttributeValue, _ tag) bool {
				return stringAttr(item, "kind") == "refund"
			})
		},
		setup: paymentsToRefund,
		audit: auditRefunds,
	},
	{
		name:     "orders",
		path:     "/v1/orders",
		external: true,
		resumes:  true,
		faults:   orderFaults,
		body: func(r *rand.Rand, amount int64) map[string]any {
			b := baseBody(r, amount, orderSources.pick(r))
			b["email"] = fmt.Sprintf("cus%d@example.com", r.IntN(1000))
			return b
		},
		// 201 paid; 402 card_declined; 422 provider_rejected, for tokUnknown.
		finals: []int{http.StatusCreated, http.StatusPaymentRequired, http.StatusUnprocessableEntity},
		codes:  []string{"card_declined", "provider_rejected"},
		// The order exists from the first phase on, whatever the provider
		// answers.
		effectful: func(int) bool { return true },
		effects: func(ctx context.Context, s systems) (map[tag]int, error) {
			return taggedItems(ctx, s.db, s.cfg.Table("OrdersTable"), nil)
		},
		pending: receiptsPending,
		audit:   auditOrders,
	},
}

// providerCharges counts the provider simulator's charges per tag, those of
// requests to the named endpoint only.
func providerCharges(ctx context.Context, s systems, endpoint string) (map[tag]int, error) {
	return taggedItems(ctx, s.db, s.cfg.Table("ProviderTable"), func(item map[string]types.AttributeValue, t tag) bool {
		kind, _ := item["kind"].(*types.AttributeValueMemberS)
		return kind != nil && kind.Value == "charge" && t.endpoint == endpoint
	})
}

// tag identifies a request variant. It travels in the body's metadata, so
// that the payment items and the provider's charges it leaves name it.
type tag struct {
	run, tenant, key string
	variant          int
	endpoint         string
}

// Metadata keys of a tag.
const (
	metaRun      = "mc_run"
	metaTenant   = "mc_tenant"
	metaKey      = "mc_key"
	metaVariant  = "mc_variant"
	metaEndpoint = "mc_endpoint"
)

func (t tag) metadata() map[string]string {
	return map[string]string{
		metaRun: t.run, metaTenant: t.tenant, metaKey: t.key,
		metaVariant: strconv.Itoa(t.variant), metaEndpoint: t.endpoint,
	}
}

// tagOf reads a tag back from metadata.
func tagOf(md map[string]string) (tag, bool) {
	v, err := strconv.Atoi(md[metaVariant])
	if err != nil || md[metaRun] == "" {
		return tag{}, false
	}
	return tag{run: md[metaRun], tenant: md[metaTenant], key: md[metaKey], variant: v, endpoint: md[metaEndpoint]}, true
}

// tagInJSON reads the tag in the metadata of a JSON object (a request, a
// payment, a charge); false when there is none.
func tagInJSON(b []byte) (tag, bool) {
	var doc struct {
		Metadata map[string]string `json:"metadata"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return tag{}, false
	}
	return tagOf(doc.Metadata)
}

// taggedItems counts a table's items per tag of their metadata attribute,
// those that keep passes (all when nil).
func taggedItems(ctx context.Context, db *dynamodb.Client, table string, keep func(map[string]types.AttributeValue, tag) bool) (map[tag]int, error) {
	items, err := scan(ctx, db, table)
	if err != nil {
		return nil, err
	}
	counts := map[tag]int{}
	for _, item := range items {
		md, ok := item["metadata"].(*types.AttributeValueMemberM)
		if !ok {
			continue
		}
		m := map[string]string{}
		for k, v := range md.Value {
			if s, ok := v.(*types.AttributeValueMemberS); ok {
				m[k] = s.Value
			}
		}
		t, ok := tagOf(m)
		if ok && (keep == nil || keep(item, t)) {
			counts[t]++
		}
	}
	return counts, nil
}

// scan reads a whole table, consistently.
func scan(ctx context.Context, db *dynamodb.Client, table string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	in := &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true)}
	for {
		out, err := db.Scan(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", table, err)
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// render writes body as JSON with its keys in a random order and random
// spacing: another text of the same request, with the same fingerprint.
func render(r *rand.Rand, body map[string]any) []byte {
	var b strings.Builder
	writeObject(&b, r, body)
	return []byte(b.String())
}

func writeObject(b *strings.Builder, r *rand.Rand, obj map[string]any) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	// Map order is already random, but not seeded: sort, then shuffle.
	slices.Sort(keys)
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	sep, colon := ",", ":"
	if r.IntN(2) == 0 {
		sep, colon = ", ", ": "
	}
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(sep)
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(colon)
		switch v := obj[k].(type) {
		case map[string]any:
			writeObject(b, r, v)
		case map[string]string:
			m := make(map[string]any, len(v))
			for k, s := range v {
				m[k] = s
			}
			writeObject(b, r, m)
		default:
			vb, _ := json.Marshal(v)
			b.Write(vb)
		}
	}
	b.WriteByte('}')
}

// stringAttr is an item's string attribute, "" when absent.
func stringAttr(item map[string]types.AttributeValue, name string) string {
	s, _ := item[name].(*types.AttributeValueMemberS)
	if s == nil {
		return ""
	}
	return s.Value
}
