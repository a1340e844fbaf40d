package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/payments"
)

// storedGroup is the group of the stored sizes.
const storedGroup = "stored bytes"

// storedSizes reports what a record takes in DynamoDB: each endpoint's
// record beside its business item, and the records of 100 KB and 1 MB
// answers, JSON (which the store compresses) and random bytes (which it
// cannot), stored through the middleware on an Atomic route: the record
// item and its chunk items, and the write's capacity. Without the handler
// part (-only stored), it sends each endpoint's first request itself.
func storedSizes(ctx context.Context, h *handlers, rep *Report) error {
	runs := h.runs
	if len(runs) == 0 {
		for _, e := range endpoints {
			r, err := h.newRun(ctx, e)
			if err != nil {
				return err
			}
			firsts, err := r.first(ctx, 1)
			if err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
			if err := r.baselineItems(ctx, firsts[0]); err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
			runs = append(runs, r)
		}
	}
	for _, r := range runs {
		base := Row{Group: storedGroup, Case: r.e.name + ": business item", N: 1, Baseline: true,
			Figures: map[string]float64{FigBytes: float64(ItemSize(r.business)), FigItems: 1}}
		rec := Row{Group: storedGroup, Case: r.e.name + ": record of a first request", N: 1,
			Figures: map[string]float64{FigBytes: float64(ItemSize(r.record)), FigItems: 1}}
		rec.compare(base, FigBytes)
		rep.Rows = append(rep.Rows, base, rec)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store:  dynamo.New(h.counted, h.env.cfg.Table("IdempotencyTable")),
		Tenant: func(*http.Request) (string, bool) { return tenant, true },
	})
	if err != nil {
		return err
	}
	// The route answers body, of contentType.
	var body []byte
	var contentType string
	handler := mw.Atomic("POST /bench/answers", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	for _, size := range []int{100 << 10, 1 << 20} {
		for _, kind := range []string{"JSON", "random bytes"} {
			body, contentType = jsonAnswer(size), "application/json"
			if kind != "JSON" {
				body, contentType = make([]byte, size), "application/octet-stream"
				_, _ = rand.Read(body)
			}
			key := h.tag("answer")
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/bench/answers", strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			rec := httptest.NewRecorder()
			h.meter.Reset()
			handler.ServeHTTP(rec, req)
			var m measured
			if err := h.tally(ctx, &m); err != nil {
				return err
			}
			t := m.tally
			if rec.Code != http.StatusCreated || rec.Body.Len() != size {
				return fmt.Errorf("bench: a %d-byte answer: %d, %d bytes", size, rec.Code, rec.Body.Len())
			}
			bytes, items, err := recordSize(ctx, h, idempotency.NewKey(tenant, key))
			if err != nil {
				return err
			}
			row := Row{Group: storedGroup, Case: fmt.Sprintf("%s answer of %s", kind, sizeName(size)), N: 1,
				Calls:   map[string]float64{},
				Figures: map[string]float64{FigAnswer: float64(size), FigBytes: float64(bytes), FigItems: float64(items), FigCalls: float64(t.total()), FigWCU: t.WCU}}
			for op, c := range t.Calls {
				row.Calls[op] = float64(c)
			}
			row.Ratios = append(row.Ratios, Ratio{Baseline: "the answer", Figure: FigBytes, Value: ratio(float64(bytes), float64(size))})
			rep.Rows = append(rep.Rows, row)
		}
	}
	return nil
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// recordSize returns the bytes (as DynamoDB counts them) of key's record
// item and of the chunk items beside it, and their number.
func recordSize(ctx context.Context, h *handlers, key idempotency.Key) (int, int, error) {
	pages := dynamodb.NewScanPaginator(h.env.client, &dynamodb.ScanInput{
		TableName:                 aws.String(h.env.cfg.Table("IdempotencyTable")),
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String("pk = :id OR begins_with(pk, :chunks)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": &types.AttributeValueMemberS{Value: key.ID()}, ":chunks": &types.AttributeValueMemberS{Value: key.ID() + "#"}},
	})
	bytes, items := 0, 0
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: scan for %s: %w", key.Short(), err)
		}
		for _, it := range page.Items {
			bytes += ItemSize(it)
			items++
		}
	}
	if items == 0 {
		return 0, 0, fmt.Errorf("bench: no record %s", key.Short())
	}
	return bytes, items, nil
}

// jsonAnswer is a JSON list of payments of about size bytes, padded to
// size exactly: an answer as compressible as an API's.
func jsonAnswer(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	for i := 0; ; i++ {
		p := fmt.Sprintf(`{"id":%q,"object":"payment","amount":%d,"currency":"usd","customer":"cus_%d","description":null,"metadata":{},"status":"succeeded","created":%d}`,
			payments.NewID(), 100+mrand.IntN(100000), mrand.IntN(5000), 1767225600+mrand.IntN(1<<20))
		if b.Len()+len(p)+len(`],"pad":""}`)+1 > size {
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(p)
	}
	b.WriteString(`],"pad":"`)
	b.WriteString(strings.Repeat(" ", size-b.Len()-2))
	b.WriteString(`"}`)
	return []byte(b.String())
}
