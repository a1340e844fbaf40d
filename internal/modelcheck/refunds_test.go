package modelcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/oncehq/once/internal/payments"
)

// refundablePayment is the amount of the payment a tenant's refunds share:
// two refunds of a first variant's amount (1000 to 1099) fit or not, three
// never do, so that refunds of different keys race for what is left while
// others are in flight, and some find too little.
const refundablePayment = 2100

// paymentsToRefund charges, through the stack, one payment per tenant whose
// refunds variants there are, with a source drawn from refundSources (it
// decides what the provider does with the payment's refunds) unless the
// tenant's first variant names one in the payment's place (crafted
// schedules do), waits for the
// worker to settle them succeeded, and puts each payment's ID in its
// variants' body.
func paymentsToRefund(ctx context.Context, c *checker, vs []planned) error {
	type group struct{ tenant, source string }
	r := mrand.New(mrand.NewPCG(c.cfg.seed, 0x4ef0d))
	byTenant := map[string]group{}
	byGroup := map[group][]*variant{}
	var groups []group
	for _, pv := range vs {
		g, ok := byTenant[pv.tenant]
		if !ok {
			source, _ := pv.v.body["payment"].(string)
			switch {
			case source != "":
			case c.cfg.settling:
				source = settlingSources.pick(r)
			default:
				source = refundSources.pick(r)
			}
			g = group{pv.tenant, source}
			byTenant[pv.tenant] = g
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], pv.v)
	}
	ids := make([]string, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			body := fmt.Sprintf(`{"amount": %d, "currency": "EUR", "customer": "cus_refunds", "source": %q}`, refundablePayment, g.source)
			status, resp, err := c.call(ctx, http.MethodPost, g.tenant, "/v1/payments", fmt.Sprintf("mc-%s-payment-%d", c.run, i), body)
			var p struct{ ID string }
			if err == nil && (status != http.StatusCreated || json.Unmarshal(resp, &p) != nil || p.ID == "") {
				err = fmt.Errorf("create = %d %s", status, resp)
			}
			if err != nil {
				errs[i] = fmt.Errorf("the payment of %s's refunds of %s: %w", g.tenant, g.source, err)
				return
			}
			ids[i] = p.ID
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if c.cfg.settling {
		// The refunds race the worker's settlement: they may find their
		// payment pending.
		for i, g := range groups {
			for _, v := range byGroup[g] {
				v.body["payment"] = ids[i]
			}
		}
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for i, g := range groups {
		for {
			status, resp, err := c.call(ctx, http.MethodGet, g.tenant, "/v1/payments/"+ids[i], "", "")
			var p struct{ Status string }
			if err == nil && (status != http.StatusOK || json.Unmarshal(resp, &p) != nil) {
				err = fmt.Errorf("GET = %d %s", status, resp)
			}
			switch {
			case err != nil:
				return fmt.Errorf("payment %s: %w", ids[i], err)
			case p.Status == string(payments.StatusSucceeded):
			case p.Status != string(payments.StatusPending):
				return fmt.Errorf("payment %s is %s, want succeeded", ids[i], p.Status)
			case time.Now().After(deadline):
				return fmt.Errorf("payment %s still pending after 60s", ids[i])
			default:
				time.Sleep(100 * time.Millisecond)
				continue
			}
			break
		}
		for _, v := range byGroup[g] {
			v.body["payment"] = ids[i]
		}
	}
	return nil
}

// auditRefunds holds the refunds table and the payments to the provider's
// refunds: a refund item for each refund the provider made, and none
// other; every payment's amount_refunded the sum of its charge's refunds,
// nothing held any more (the system is quiet), its refundable amount what
// is left, and never more refunded, at the provider or in the table, than
// the payment's amount.
func auditRefunds(ctx context.Context, s systems, run string) ([]string, error) {
	items, err := scan(ctx, s.db, s.cfg.Table("ProviderTable"))
	if err != nil {
		return nil, err
	}
	atProvider := map[tag]int{}
	byCharge := map[string]int64{}
	for _, item := range items {
		if stringAttr(item, "kind") != "refund" {
			continue
		}
		var r struct {
			Charge   string            `dynamodbav:"charge"`
			Amount   int64             `dynamodbav:"amount"`
			Metadata map[string]string `dynamodbav:"metadata"`
		}
		if err := attributevalue.UnmarshalMap(item, &r); err != nil {
			return nil, fmt.Errorf("provider refund: %w", err)
		}
		byCharge[r.Charge] += r.Amount
		if tg, ok := tagOf(r.Metadata); ok && tg.run == run {
			atProvider[tg]++
		}
	}
	inTable, err := taggedItems(ctx, s.db, s.cfg.Table("RefundsTable"), nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for tg, n := range inTable {
		if tg.run == run && n != atProvider[tg] {
			out = append(out, fmt.Sprintf("refunds of %+v: %d in the refunds table, %d at the provider", tg, n, atProvider[tg]))
		}
	}
	for tg, n := range atProvider {
		if _, ok := inTable[tg]; !ok {
			out = append(out, fmt.Sprintf("refunds of %+v: none in the refunds table, %d at the provider", tg, n))
		}
	}
	pays, err := scan(ctx, s.db, s.cfg.Table("PaymentsTable"))
	if err != nil {
		return nil, err
	}
	for _, item := range pays {
		var p payments.Payment
		if err := attributevalue.UnmarshalMap(item, &p); err != nil {
			return nil, fmt.Errorf("payment: %w", err)
		}
		if p.Status != payments.StatusSucceeded {
			continue
		}
		refunded := byCharge[p.ProviderChargeID]
		if refunded > p.Amount || p.AmountRefunded > p.Amount || p.Refundable < 0 {
			out = append(out, fmt.Sprintf("payment %s of %s: %d refunded at the provider, amount_refunded %d, refundable %d: more than its amount %d",
				p.ID, p.Tenant, refunded, p.AmountRefunded, p.Refundable, p.Amount))
		}
		if p.AmountRefunded != refunded || len(p.Holds) > 0 || p.Refundable != p.Amount-p.AmountRefunded {
			out = append(out, fmt.Sprintf("payment %s of %s: amount_refunded %d, refundable %d of %d, holds %v; the provider refunded %d of its charge",
				p.ID, p.Tenant, p.AmountRefunded, p.Refundable, p.Amount, p.Holds, refunded))
		}
	}
	return out, nil
}
