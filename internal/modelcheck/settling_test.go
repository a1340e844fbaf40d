package modelcheck

import (
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
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
// settled (a replay may come any time after). The proxy bounds when that
// was (settlement): an answer to a request sent once a settlement had
// landed and been answered is a violation; one sent while the first
// settlement that landed was in flight is not, as the request may have
// read the payment before it landed. It returns the violation, "" when
// there is none.
func (c *checker) notRefundable(p *partition, o *op) string {
	if o.replayed {
		return ""
	}
	id, _ := p.variants[o.variant].body["payment"].(string)
	s, settled := c.px.settledAt(payments.PK(p.tenant, id))
	if settled && o.call >= s.by {
		return fmt.Sprintf("%s: %s %s, sent %v after its payment's settlement had landed", o.label(), o.answerLabel(), codeNotRefundable,
			time.Duration(o.call-s.by).Round(time.Millisecond))
	}
	return ""
}

// notRefundableTimes counts the answers payment_not_refundable (not
// replayed) to refunds sent before their payment's first settlement was
// sent, while it was in flight, and after it had landed (violations), and
// the payments settled.
func (c *checker) notRefundableTimes() (before, during, after, settled int) {
	c.mu.Lock()
	ops := slices.Clone(c.ops)
	c.mu.Unlock()
	seen := map[string]bool{}
	for _, o := range ops {
		v := o.part.variants[o.variant]
		if v.ep.name != "refunds" {
			continue
		}
		id, _ := v.body["payment"].(string)
		pk := payments.PK(o.part.tenant, id)
		s, ok := c.px.settledAt(pk)
		if ok && !seen[pk] {
			seen[pk] = true
			settled++
		}
		if o.replayed || o.class != classFinal || o.code != codeNotRefundable {
			continue
		}
		switch {
		case !ok || o.call < s.from:
			before++
		case o.call < s.by:
			during++
		default:
			after++
		}
	}
	return before, during, after, settled
}

// TestNotRefundable checks the bounds of payment_not_refundable: allowed
// to a refund sent before its payment's first settlement landed, or while
// it was in flight, never to one sent once it had been answered, unless
// replayed.
func TestNotRefundable(t *testing.T) {
	const pk = "acme#pay_1"
	px := &dynamoProxy{settled: map[string]settlement{}}
	// Two settlements landed (a resettle plant), answered out of order:
	// the first settlement landed in [100, 150].
	px.settledWithin(pk, 120, 200)
	px.settledWithin(pk, 100, 150)
	if got, _ := px.settledAt(pk); got != (settlement{from: 100, by: 150}) {
		t.Fatalf("settledAt = %+v, want {100 150}", got)
	}
	c := &checker{px: px}
	p := &partition{tenant: "acme", key: "k", variants: []*variant{{ep: endpointNamed(t, "refunds"), body: map[string]any{"payment": "pay_1"}}}}
	other := &partition{tenant: "acme", key: "k", variants: []*variant{{ep: endpointNamed(t, "refunds"), body: map[string]any{"payment": "pay_2"}}}}
	tests := []struct {
		name     string
		part     *partition
		call     int64
		replayed bool
		want     bool // a violation
	}{
		{"sent before the settlement was sent", p, 99, false, false},
		{"sent while it was in flight", p, 100, false, false},
		{"sent just before it was answered", p, 149, false, false},
		{"sent as it was answered", p, 150, false, true},
		{"sent after", p, 5000, false, true},
		{"a replay after", p, 5000, true, false},
		{"a payment never settled", other, 5000, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &op{part: tt.part, call: tt.call, ret: tt.call + 10, status: 400, code: codeNotRefundable, class: classFinal, replayed: tt.replayed, digest: "400#d"}
			if got := c.notRefundable(tt.part, o); (got != "") != tt.want {
				t.Errorf("notRefundable(sent at %d) = %q, want a violation %v", tt.call, got, tt.want)
			}
		})
	}
}

// TestSettlementLandsWithoutItsCaller checks that the proxy notes a
// settlement that succeeded although its caller gave up on it before it
// was sent: the write is sent all the same, and lands.
func TestSettlementLandsWithoutItsCaller(t *testing.T) {
	var sent atomic.Int32
	db := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer db.Close()
	var now atomic.Int64
	px, err := startProxy(db.URL, 1, func() int64 { return now.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer px.close()
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), settlementKey{}, "acme#pay_1"))
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	resp, err := px.roundTrip(r, []byte("{}"))
	if err != nil {
		t.Fatalf("roundTrip = %v, want the settlement sent", err)
	}
	resp.Body.Close()
	if got, ok := px.settledAt("acme#pay_1"); !ok || got != (settlement{from: 1, by: 2}) || sent.Load() != 1 {
		t.Errorf("settledAt = %+v, %v after %d calls; want {1 2}, true after 1", got, ok, sent.Load())
	}
}
