package modelcheck

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/outbox"
)

// receiptJobs reads the outbox's receipt jobs.
func receiptJobs(ctx context.Context, s systems) ([]outbox.Job, error) {
	items, err := scan(ctx, s.db, s.cfg.Table("OutboxTable"))
	if err != nil {
		return nil, err
	}
	var jobs []outbox.Job
	for _, item := range items {
		var j outbox.Job
		if err := attributevalue.UnmarshalMap(item, &j); err != nil {
			return nil, fmt.Errorf("receipt job: %w", err)
		}
		if j.Kind == outbox.KindReceipt {
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}

// receiptsPending lists the receipt jobs not sent yet: the receipts
// function (or the resender) has yet to send them. The mail of the run's
// addresses never fails.
func receiptsPending(ctx context.Context, s systems) ([]string, error) {
	jobs, err := receiptJobs(ctx, s)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, j := range jobs {
		if j.State != outbox.Sent {
			out = append(out, fmt.Sprintf("receipt job %s is %s after %d attempts (%s)", j.ID, j.State, j.Attempts, j.LastError))
		}
	}
	return out, nil
}

// auditOrders holds every order of the run (the system quiet) to what the
// provider, the outbox and the mail API hold: a finished order, paid or
// failed (paid when its provider was down only for a while); one provider
// charge for an order the provider charged (paid, or declined), its ID the
// order's, none for one the provider refused; for a paid order one receipt
// job, sent, and exactly one message; nothing of the kind for another
// order; and no charge, job or message without its order.
func auditOrders(ctx context.Context, s systems, run string) ([]string, error) {
	items, err := scan(ctx, s.db, s.cfg.Table("OrdersTable"))
	if err != nil {
		return nil, err
	}
	byTag := map[tag]orders.Order{}
	byID := map[string]bool{}
	for _, item := range items {
		var o orders.Order
		if err := attributevalue.UnmarshalMap(item, &o); err != nil {
			return nil, fmt.Errorf("order: %w", err)
		}
		byID[o.ID] = true
		if tg, ok := tagOf(o.Metadata); ok && tg.run == run {
			byTag[tg] = o
		}
	}
	charges := map[tag][]string{}
	messages := map[string]int{} // by order ID
	provider, err := scan(ctx, s.db, s.cfg.Table("ProviderTable"))
	if err != nil {
		return nil, err
	}
	for _, item := range provider {
		switch stringAttr(item, "kind") {
		case "charge":
			var c struct {
				ID       string            `dynamodbav:"id"`
				Metadata map[string]string `dynamodbav:"metadata"`
			}
			if err := attributevalue.UnmarshalMap(item, &c); err != nil {
				return nil, fmt.Errorf("provider charge: %w", err)
			}
			if tg, ok := tagOf(c.Metadata); ok && tg.run == run && tg.endpoint == "orders" {
				charges[tg] = append(charges[tg], c.ID)
			}
		case "mailbox":
			list, _ := item["messages"].(*types.AttributeValueMemberL)
			if list == nil {
				continue
			}
			for _, m := range list.Value {
				if mm, ok := m.(*types.AttributeValueMemberM); ok {
					messages[stringAttr(mm.Value, "order")]++
				}
			}
		}
	}
	jobs, err := receiptJobs(ctx, s)
	if err != nil {
		return nil, err
	}
	jobsOf := map[string][]outbox.Job{}
	for _, j := range jobs {
		jobsOf[j.Order] = append(jobsOf[j.Order], j)
	}

	var out []string
	bad := func(o orders.Order, format string, args ...any) {
		out = append(out, fmt.Sprintf("order %s of %s (%s, %s): ", o.ID, o.Tenant, o.Status, o.FailureCode)+fmt.Sprintf(format, args...))
	}
	for _, tg := range slices.SortedFunc(maps.Keys(byTag), compareTags) {
		o := byTag[tg]
		charged, paid := 0, o.Status == orders.StatusPaid
		switch {
		case o.RecoveryPoint != orders.PointFinished || o.Status == orders.StatusCreated:
			bad(o, "not finished (at %s) once the system is quiet", o.RecoveryPoint)
		case o.Source == tokFlaky && !paid:
			// The provider was down for a while only: a retry or the
			// recovery charged it once it was back.
			bad(o, "a %s order not paid once the system is quiet", tokFlaky)
		case paid || o.FailureCode != "provider_rejected":
			charged = 1
		}
		if got := charges[tg]; len(got) != charged || charged == 1 && got[0] != o.Charge {
			bad(o, "provider charges %v, want %d (the order's %q)", got, charged, o.Charge)
		}
		js := jobsOf[o.ID]
		switch {
		case paid && (len(js) != 1 || js[0].State != outbox.Sent || messages[o.ID] != 1 || o.Receipt != orders.ReceiptSent):
			bad(o, "%d receipt jobs, %d messages, receipt %q; want one job, sent, one message", len(js), messages[o.ID], o.Receipt)
		case !paid && (len(js) != 0 || messages[o.ID] != 0):
			bad(o, "%d receipt jobs, %d messages; want none", len(js), messages[o.ID])
		}
	}
	for tg, ids := range charges {
		if _, ok := byTag[tg]; !ok {
			out = append(out, fmt.Sprintf("provider charges %v for %+v, which has no order", ids, tg))
		}
	}
	for id, n := range messages {
		if !byID[id] {
			out = append(out, fmt.Sprintf("%d messages for order %s, which does not exist", n, id))
		}
	}
	for id, js := range jobsOf {
		if !byID[id] {
			out = append(out, fmt.Sprintf("%d receipt jobs for order %s, which does not exist", len(js), id))
		}
	}
	return out, nil
}

func compareTags(a, b tag) int {
	return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.key, b.key), cmp.Compare(a.variant, b.variant))
}

// burstLanes are the porcupine lanes (clients) of one key in runBursts:
// its first request, then up to three retries at once.
const burstLanes = 4

// runBursts sends, for every key once its time has come, an order request
// that dies mid-way: most with a crash after a recovery point or after the
// provider call, the others on their own when the provider is slow, down
// for a while or never answers in time (the variant's source). Once its
// lease has about run out (a little before or after), two or three retries
// at once race to take the abandoned request over and resume it, each
// retrying after 409 or 5xx a few times; one in six sends the key's other
// body, if it has one. Every sender is a lane of its own (burstLanes per
// key).
func (c *checker) runBursts(ctx context.Context) {
	start := time.Now()
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	var wg sync.WaitGroup
	for _, p := range c.parts {
		r := mrand.New(mrand.NewPCG(c.cfg.seed, 0xb0057+uint64(p.index)))
		lane := burstLanes * p.index
		first := ""
		if r.Float64() < 0.8 {
			first = orderFaults[r.IntN(len(orderFaults))]
		}
		wait := time.Duration(r.Int64N(int64(c.cfg.history/4))) + p.from - time.Since(start)
		retries := 2 + r.IntN(2)
		seeds := make([]uint64, retries)
		for i := range seeds {
			seeds[i] = r.Uint64()
		}
		after := c.cfg.lease + time.Duration(r.IntN(400)-100)*time.Millisecond
		wg.Go(func() {
			sleep(max(wait, 0))
			if ctx.Err() != nil {
				return
			}
			c.send(ctx, lane, p, 0, first, r)
			sleep(after)
			var retriers sync.WaitGroup
			for i, s := range seeds {
				retriers.Go(func() {
					r := mrand.New(mrand.NewPCG(s, 1))
					v := 0
					if len(p.variants) > 1 && r.IntN(6) == 0 {
						v = 1 + r.IntN(len(p.variants)-1)
					}
					for range 5 {
						if o := c.send(ctx, lane+1+i, p, v, "", r); o.class != classInProgress && o.class != classFailed {
							return
						}
						sleep(time.Duration(100+r.IntN(400)) * time.Millisecond)
						if ctx.Err() != nil {
							return
						}
					}
				})
			}
			retriers.Wait()
		})
	}
	wg.Wait()
}
