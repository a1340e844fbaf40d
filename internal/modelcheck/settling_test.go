package modelcheck

import (
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/stream"
	"github.com/oncehq/once/internal/worker"
)

// settlingSources are the sources of the payments whose refunds race their
// settlement: charged at once, or slowly (the worker's call times out, the
// retrier charges again a second or more later and gets the charge), so
// that the payment stays pending from a poll of the stream to seconds.
var settlingSources = weighted{{tokVisa, 1}, {tokSlow, 2}}

// codeNotRefundable is the answer to a refund of a payment that has not
// succeeded (refunds.ErrNotRefundable): in the settling profile, a refund
// that found its payment still pending.
const codeNotRefundable = "payment_not_refundable"

// redeliver delivers every pending payment's INSERT record of the payments
// table's stream a second time, to a worker of its own that writes through
// the fault proxy, each batch after a random pause of 0.5s to 6s: an
// at-least-once delivery, or the retrier, racing the stack's worker and the
// refunds holding on the payment it settles. It stops when stop is called.
func (c *checker) redeliver(t *testing.T) (stop func()) {
	t.Helper()
	cfg := c.sys.cfg
	awsCfg := dynamotest.Config(t)
	charger, err := provider.Require(cfg, awsCfg.Credentials, awsCfg.Region, "redeliverer")
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{
		Charger:     charger,
		Settler:     payments.NewTable(dynamoclient.New(awsCfg, c.px.url), cfg.Table("PaymentsTable")),
		CallTimeout: cfg.ProviderSettle,
		Budget:      cfg.ProviderTimeout + 2*time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	r := mrand.New(mrand.NewPCG(c.cfg.seed, 0x5e771e))
	pause := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return 500*time.Millisecond + time.Duration(r.Int64N(int64(5500*time.Millisecond)))
	}
	poller, err := stream.NewPoller(stream.PollerOptions{
		Client: dynamotest.Streams(t),
		DB:     c.sys.db,
		Table:  cfg.Table("PaymentsTable"),
		Name:   "redeliverer",
		Handler: func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			select {
			case <-ctx.Done():
			case <-time.After(pause()):
			}
			return w.Handle(ctx, ev)
		},
		Filter: func(rec events.DynamoDBEventRecord) bool {
			s, ok := rec.Change.NewImage["status"]
			return rec.EventName == "INSERT" && ok && s.DataType() == events.DataTypeString && s.String() == string(payments.StatusPending)
		},
		MaxRetryAttempts: 1,
		BisectOnError:    true,
		Logger:           slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = poller.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// notRefundable checks a refund's answer payment_not_refundable in the
// settling profile: the answer to a refund whose hold found its payment
// still pending, so one the request sent before the payment was first
// settled (a replay may come any time after). It returns the violation, ""
// when there is none.
func (c *checker) notRefundable(p *partition, o *op) string {
	if o.replayed {
		return ""
	}
	id, _ := p.variants[o.variant].body["payment"].(string)
	at, settled := c.px.settledAt(payments.PK(p.tenant, id))
	if settled && o.call >= at {
		return fmt.Sprintf("%s: %s %s, sent %v after its payment was settled", o.label(), o.answerLabel(), codeNotRefundable,
			time.Duration(o.call-at).Round(time.Millisecond))
	}
	return ""
}
