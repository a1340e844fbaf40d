package bench

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/samtemplate"
)

// reply is an answer of the front door, with its headers.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// TestLimitRoute holds the bench's one-transaction limit (POST
// /bench/limit) to what it stands for, through the devstack's front door
// as the bench drives it: a first request writes exactly one payment and
// one record and answers 201 with the payment and its Location; a retry
// with the same key and body replays the same bytes and writes nothing; the
// same key with the body's fields reordered is the same request (a replay);
// the same key with another body is 422 and writes nothing; a record past
// its expiry frees its key (a new payment, 201 not replayed); duplicates
// sent at once make one payment, one 201 that is not a replay, and the same bytes
// in every 201.
func TestLimitRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("a devstack against DynamoDB Local")
	}
	stack, prefix := testStack(t, true)
	client := dynamotest.Client(t)
	paymentsTable, records := stack.Config().Table("PaymentsTable"), prefix+limitTableID

	count := func(table string) int {
		t.Helper()
		out, err := client.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(table), Select: types.SelectCount, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatalf("Scan(%s) = %v", table, err)
		}
		return int(out.Count)
	}
	wantItems := func(step string, pays, recs int) {
		t.Helper()
		if got := count(paymentsTable); got != pays {
			t.Errorf("%s: %d payments, want %d", step, got, pays)
		}
		if got := count(records); got != recs {
			t.Errorf("%s: %d records, want %d", step, got, recs)
		}
	}
	hc := &http.Client{}
	send := func(key, body string) reply {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, stack.URL()+limitResource, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return reply{}
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idempotency.Header, key)
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return reply{}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Error(err)
		}
		return reply{status: resp.StatusCode, header: resp.Header, body: b}
	}

	retention := stack.Config().Retention
	if retention <= 0 {
		retention = config.DefaultRetention
	}
	key, body := prefix+"key", paymentBody(prefix+"customer", 1999, "")
	before := time.Now()
	first := send(key, body)
	after := time.Now()
	if first.status != http.StatusCreated || first.header.Get(idempotency.ReplayedHeader) != "" {
		t.Fatalf("first request: %d %v %s, want 201, not replayed", first.status, first.header, first.body)
	}
	var p struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if err := json.Unmarshal(first.body, &p); err != nil || p.Amount != 1999 {
		t.Fatalf("first answer %s: %v, want a payment of 1999", first.body, err)
	}
	if got, want := first.header.Get("Location"), "/v1/payments/"+p.ID; got != want {
		t.Errorf("first Location = %q, want %q", got, want)
	}
	wantItems("first request", 1, 1)
	if !dynamotest.Exists(t, client, paymentsTable, payments.PK(tenant, p.ID)) {
		t.Errorf("no payment item %s", payments.PK(tenant, p.ID))
	}
	var rec limitRecord
	if err := attributevalue.UnmarshalMap(dynamotest.Item(t, client, records, idempotency.NewKey(tenant, key).ID()), &rec); err != nil {
		t.Fatal(err)
	}
	fp, err := idempotency.RequestFingerprint(http.MethodPost, limitResource, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Fingerprint != fp || rec.Status != http.StatusCreated || !bytes.Equal(rec.Body, first.body) {
		t.Errorf("record %+v, want the request's fingerprint %s, 201 and the answer's bytes", rec, fp)
	}
	if lo, hi := before.Add(retention).Unix(), after.Add(retention).Unix()+1; rec.Expires < lo || rec.Expires > hi {
		t.Errorf("record expires at %d, want now + the retention (%s): %d to %d", rec.Expires, retention, lo, hi)
	}

	retry := send(key, body)
	if retry.status != http.StatusCreated || retry.header.Get(idempotency.ReplayedHeader) != "true" || !bytes.Equal(retry.body, first.body) {
		t.Errorf("retry: %d %v %s, want 201 replayed, the first answer's bytes %s", retry.status, retry.header, retry.body, first.body)
	}
	wantItems("retry", 1, 1)

	// The same fields in another order and spacing: the same request.
	reordered := send(key, fmt.Sprintf(`{"metadata":{"channel":"web","order":"1234"},"customer":%q,"description":"Order 1234","currency":"usd","amount":1999}`, prefix+"customer"))
	if reordered.status != http.StatusCreated || reordered.header.Get(idempotency.ReplayedHeader) != "true" || !bytes.Equal(reordered.body, first.body) {
		t.Errorf("the body reordered: %d %v %s, want 201 replayed, the first answer's bytes %s", reordered.status, reordered.header, reordered.body, first.body)
	}
	wantItems("the body reordered", 1, 1)

	other := send(key, paymentBody(prefix+"customer", 2000, ""))
	var prob struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(other.body, &prob)
	if other.status != http.StatusUnprocessableEntity || prob.Code != "idempotency_key_reused" {
		t.Errorf("another body: %d %s, want 422 idempotency_key_reused", other.status, other.body)
	}
	wantItems("another body", 1, 1)

	// A record past its expiry frees its key: a new payment, a new record.
	expiredKey := prefix + "expired"
	old, err := attributevalue.MarshalMap(limitRecord{
		PK: idempotency.NewKey(tenant, expiredKey).ID(), Fingerprint: fp, Status: http.StatusCreated,
		Body: []byte(`{"id":"pay_expired"}`), Expires: time.Now().Add(-time.Minute).Unix(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(records), Item: old}); err != nil {
		t.Fatal(err)
	}
	renewed := send(expiredKey, body)
	if renewed.status != http.StatusCreated || renewed.header.Get(idempotency.ReplayedHeader) != "" || bytes.Equal(renewed.body, first.body) || strings.Contains(string(renewed.body), "pay_expired") {
		t.Errorf("an expired record's key: %d %v %s, want 201 not replayed, a new payment", renewed.status, renewed.header, renewed.body)
	}
	wantItems("an expired record's key", 2, 2)
	var now limitRecord
	if err := attributevalue.UnmarshalMap(dynamotest.Item(t, client, records, idempotency.NewKey(tenant, expiredKey).ID()), &now); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(now.Body, renewed.body) || now.Expires <= time.Now().Unix() {
		t.Errorf("the expired key's record %+v, want the new answer %s and an expiry to come", now, renewed.body)
	}

	const duplicates = 8
	key2 := prefix + "key2"
	answers := make([]reply, duplicates)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = send(key2, body) })
	}
	wg.Wait()
	wantItems("duplicates at once", 3, 3)
	created := 0
	var got201 []byte
	for i, a := range answers {
		switch {
		case a.status == http.StatusCreated:
			if a.header.Get(idempotency.ReplayedHeader) == "" {
				created++
			}
			if got201 != nil && !bytes.Equal(a.body, got201) {
				t.Errorf("duplicate %d answered %s, another %s: want the same bytes", i, a.body, got201)
			}
			got201 = a.body
		case a.status != http.StatusConflict:
			t.Errorf("duplicate %d: %d %s, want 201 or 409", i, a.status, a.body)
		}
	}
	if created != 1 {
		t.Errorf("%d duplicates answered 201 not replayed, want 1", created)
	}
}

// testStack starts a devstack on the test's DynamoDB Local, as the front
// door starts it, every stream-triggered function off, with the limit's
// route and table when withLimit; its tables are named from the test and
// dropped when it ends. It returns the stack and its tables' prefix.
func testStack(t *testing.T, withLimit bool) (*devstack.Stack, string) {
	t.Helper()
	endpoint := dynamotest.Endpoint(t)
	path := dynamotest.TemplatePath(t)
	tmpl, err := samtemplate.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	prefix := t.Name() + "-" + hex.EncodeToString(b[:]) + "-"
	stack, stop, err := startStack(t.Context(), Options{DynamoDB: endpoint, TemplatePath: path}, tableVars(tmpl), prefix, "", streamReaders(tmpl, ""), withLimit)
	if err != nil {
		t.Fatalf("startStack = %v", err)
	}
	t.Cleanup(stop)
	return stack, prefix
}
