package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/payments/paymentshttp"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/refunds"
	"github.com/oncehq/once/internal/worker"
)

// env is where requests are prepared and their effects counted: the
// tables and the provider the functions use, through clients the Meter does
// not count.
type env struct {
	cfg      config.Config
	client   *dynamodb.Client
	provider *provider.Client
	tenant   string
}

// request is one request to an endpoint: its key and body, and the tag its
// effects carry (a payment's or a charge's customer, a refund's payment).
type request struct {
	key, body, tag string
	// charge is, for a refund, the charge of the payment it refunds.
	charge string
}

// endpoint is one idempotent endpoint of the API as the bench drives it.
// Every figure of every endpoint comes from this table: an endpoint is one
// entry.
type endpoint struct {
	name string
	// route is the endpoint's route (its ServeMux pattern), path its path.
	route, path string
	// external is true for an External endpoint: it holds a lease while it
	// calls out, so a duplicate finds it in progress, an abandoned
	// reservation is recovered by the checker and the reconciler, and
	// every reservation arms a lease check.
	external bool
	// points are its crash points, in the order a request reaches them.
	points []string
	// prepare returns a new request tagged tag, after doing what it needs
	// (a refund: a settled payment to refund).
	prepare func(ctx context.Context, e *env, tag string) (request, error)
	// mismatch is another body for req's key: a 422.
	mismatch func(req request) string
	// business returns the item the endpoint's business writes for the
	// request answered body, and its table: what a version of the endpoint
	// without idempotency would write (the bare baselines).
	business func(ctx context.Context, e *env, req request, body string) (string, map[string]types.AttributeValue, error)
	// effects counts the effects each of reqs made, tagged with prefix.
	effects func(ctx context.Context, e *env, prefix string, reqs []request) ([]int, error)
}

// endpoints are the API's idempotent endpoints.
var endpoints = []*endpoint{
	{
		name: "payments", route: paymentshttp.RouteCreate, path: "/v1/payments",
		points: []string{fault.AfterReserve, fault.AfterComplete},
		prepare: func(_ context.Context, _ *env, tag string) (request, error) {
			return request{key: tag, tag: tag, body: paymentBody(tag, 1999, "")}, nil
		},
		mismatch: func(req request) string { return paymentBody(req.tag, 2000, "") },
		business: func(ctx context.Context, e *env, _ request, body string) (string, map[string]types.AttributeValue, error) {
			item, err := itemByID(ctx, e, e.cfg.Table("PaymentsTable"), body, payments.PK)
			return e.cfg.Table("PaymentsTable"), item, err
		},
		effects: func(ctx context.Context, e *env, prefix string, reqs []request) ([]int, error) {
			return byCustomer(ctx, e, e.cfg.Table("PaymentsTable"), prefix, reqs)
		},
	},
	{
		name: "charges", route: charges.Route, path: "/v1/charges", external: true,
		points: []string{fault.AfterReserve, fault.AfterProviderCall, fault.AfterComplete},
		prepare: func(_ context.Context, _ *env, tag string) (request, error) {
			return request{key: tag, tag: tag, body: paymentBody(tag, 2500, simulator.TokenVisa)}, nil
		},
		mismatch: func(req request) string { return paymentBody(req.tag, 2501, simulator.TokenVisa) },
		business: func(_ context.Context, e *env, _ request, body string) (string, map[string]types.AttributeValue, error) {
			// A charge has no item of its own (the provider holds it): a
			// service without idempotency would record the charge it made.
			var charge map[string]any
			if err := json.Unmarshal([]byte(body), &charge); err != nil {
				return "", nil, fmt.Errorf("bench: charge answer: %w", err)
			}
			item, err := attributevalue.MarshalMap(charge)
			if err != nil {
				return "", nil, err
			}
			item["pk"] = &types.AttributeValueMemberS{Value: e.tenant + "#" + fmt.Sprint(charge["id"])}
			return e.cfg.Table("PaymentsTable"), item, nil
		},
		effects: providerCharges,
	},
	{
		name: "refunds", route: refunds.RouteCreate, path: "/v1/refunds", external: true,
		points: []string{fault.AfterReserve, fault.AfterProviderCall, fault.AfterComplete},
		prepare: func(ctx context.Context, e *env, tag string) (request, error) {
			id, charge, err := settledPayment(ctx, e, tag, 1000)
			if err != nil {
				return request{}, err
			}
			return request{key: tag, tag: id, charge: charge, body: refundBody(id, 400)}, nil
		},
		mismatch: func(req request) string { return refundBody(req.tag, 401) },
		business: func(ctx context.Context, e *env, _ request, body string) (string, map[string]types.AttributeValue, error) {
			item, err := itemByID(ctx, e, e.cfg.Table("RefundsTable"), body, refunds.PK)
			return e.cfg.Table("RefundsTable"), item, err
		},
		effects: func(ctx context.Context, e *env, _ string, reqs []request) ([]int, error) {
			out := make([]int, len(reqs))
			for i, r := range reqs {
				rs, _, err := e.provider.Refunds(ctx, r.charge)
				if err != nil {
					return nil, fmt.Errorf("bench: list refunds: %w", err)
				}
				out[i] = len(rs)
			}
			return out, nil
		},
	},
	{
		name: "orders", route: orders.RouteCreate, path: "/v1/orders", external: true,
		points: []string{
			steps(orders.PointOrderCreated), fault.AfterProviderCall, steps(orders.PointChargeCreated), steps(orders.PointFinished),
		},
		prepare: func(_ context.Context, _ *env, tag string) (request, error) {
			return request{key: tag, tag: tag, body: orderBody(tag, 4200)}, nil
		},
		mismatch: func(req request) string { return orderBody(req.tag, 4201) },
		business: func(ctx context.Context, e *env, _ request, body string) (string, map[string]types.AttributeValue, error) {
			item, err := itemByID(ctx, e, e.cfg.Table("OrdersTable"), body, orders.PK)
			return e.cfg.Table("OrdersTable"), item, err
		},
		effects: providerCharges,
	},
}

// steps is the fault point after a multi-step request's recovery point.
func steps(point string) string { return idempotency.PointAfter(point) }

func orderBody(customer string, amount int) string {
	return fmt.Sprintf(`{"amount": %d, "currency": "EUR", "customer": %q, "email": "ada@example.com", "description": "Order 2001", "metadata": {"order": "2001"}, "source": %q}`,
		amount, customer, simulator.TokenVisa)
}

// paymentBody is a create-payment (or, with a source, create-charge) body
// for customer.
func paymentBody(customer string, amount int, source string) string {
	b := fmt.Sprintf(`{"amount": %d, "currency": "usd", "customer": %q, "description": "Order 1234", "metadata": {"order": "1234", "channel": "web"}`, amount, customer)
	if source != "" {
		b += fmt.Sprintf(`, "source": %q`, source)
	}
	return b + "}"
}

func refundBody(payment string, amount int) string {
	return fmt.Sprintf(`{"payment": %q, "amount": %d, "reason": "requested_by_customer"}`, payment, amount)
}

// settledPayment inserts a pending payment of amount for customer, charges
// it at the provider as the worker does (the worker's key: when the worker
// sees the payment too, the provider answers both with one charge) and
// settles it succeeded, and returns its ID and charge.
func settledPayment(ctx context.Context, e *env, customer string, amount int64) (id, charge string, err error) {
	req, err := payments.DecodeWithSource([]byte(paymentBody(customer, int(amount), simulator.TokenVisa)))
	if err != nil {
		return "", "", err
	}
	p := payments.New(e.tenant, req, time.Now())
	item, err := attributevalue.MarshalMap(p)
	if err != nil {
		return "", "", err
	}
	if _, err := e.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.cfg.Table("PaymentsTable")), Item: item}); err != nil {
		return "", "", fmt.Errorf("bench: insert a payment: %w", err)
	}
	c, err := e.provider.Charge(ctx, worker.ChargeKey(e.tenant, p.ID), charges.ProviderRequest(req))
	if err != nil {
		return "", "", fmt.Errorf("bench: charge a payment: %w", err)
	}
	err = payments.NewTable(e.client, e.cfg.Table("PaymentsTable")).Settle(ctx, e.tenant, p.ID, payments.StatusSucceeded, c.ID, "")
	if err != nil && !errors.Is(err, payments.ErrNotPending) {
		return "", "", fmt.Errorf("bench: settle a payment: %w", err)
	}
	return p.ID, c.ID, nil
}

// itemByID reads the item of table that the answer body (a JSON object with
// an "id") names, its key pk(tenant, id).
func itemByID(ctx context.Context, e *env, table, body string, pk func(tenant, id string) string) (map[string]types.AttributeValue, error) {
	var v struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.ID == "" {
		return nil, fmt.Errorf("bench: no id in the answer %.200q", body)
	}
	return getItem(ctx, e.client, table, pk(e.tenant, v.ID))
}

// getItem reads the item pk of table, consistently; an error when there is
// none.
func getItem(ctx context.Context, client *dynamodb.Client, table, pk string) (map[string]types.AttributeValue, error) {
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("bench: get %s: %w", pk, err)
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("bench: no item %s in %s", pk, table)
	}
	return out.Item, nil
}

// providerCharges counts the charges the provider made for each request's
// customer (every tag starts with prefix).
func providerCharges(ctx context.Context, e *env, prefix string, reqs []request) ([]int, error) {
	return countBy(ctx, e, e.cfg.Table("ProviderTable"), "charge", prefix, reqs)
}

// byCustomer counts the items of table whose customer is each request's tag
// (every tag starts with prefix).
func byCustomer(ctx context.Context, e *env, table, prefix string, reqs []request) ([]int, error) {
	return countBy(ctx, e, table, "", prefix, reqs)
}

// countBy counts the items of table (of the kind, when not empty) whose
// customer is each request's tag (every tag starts with prefix).
func countBy(ctx context.Context, e *env, table, kind, prefix string, reqs []request) ([]int, error) {
	filter := "begins_with(#customer, :prefix)"
	names := map[string]string{"#customer": "customer"}
	values := map[string]types.AttributeValue{":prefix": &types.AttributeValueMemberS{Value: prefix}}
	if kind != "" {
		filter += " AND #kind = :kind"
		names["#kind"] = "kind"
		values[":kind"] = &types.AttributeValueMemberS{Value: kind}
	}
	pages := dynamodb.NewScanPaginator(e.client, &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ProjectionExpression:      aws.String("#customer"),
	})
	counts := map[string]int{}
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("bench: scan %s: %w", table, err)
		}
		for _, it := range page.Items {
			if c, ok := it["customer"].(*types.AttributeValueMemberS); ok {
				counts[c.Value]++
			}
		}
	}
	out := make([]int, len(reqs))
	for i, r := range reqs {
		out[i] = counts[r.tag]
	}
	return out, nil
}
