package modelcheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency/dynamo"
)

// takeoverLog is what the proxy saw of the takeovers of one item: the
// tries, by the lease token each took over (a retry's Advance that keeps
// the recovery point under a new, unexpired token, fenced on the abandoned
// one), as the sets of the new tokens they wrote (an SDK retry resends the
// same); when a try succeeded (the checker's clock); and the tries that
// succeeded, by the token they took over, as the sets of the new tokens
// they wrote (two: two owners of one lease at once, which the lease fence
// forbids; an SDK retry of one try writes the same token, so it is one).
type takeoverLog struct {
	tries   map[string]map[string]bool
	won     []int64
	winners map[string]map[string]bool
}

// takeoverOf reports whether a call is a takeover of a multi-step
// request's lease (idempotency's Call.takeOver: Advance from a point to the
// same point, under a new token, with a lease that runs), and returns the
// token it takes over and the one it writes. A pause (the same write, but
// its lease expires at once) and the phases' own Advances (same token) are
// not.
func takeoverOf(op string, req map[string]any) (old, lease string, ok bool) {
	if op != "UpdateItem" {
		return "", "", false
	}
	values, _ := req["ExpressionAttributeValues"].(map[string]any)
	attr := func(name, typ string) string {
		v, _ := values[name].(map[string]any)
		s, _ := v[typ].(string)
		return s
	}
	from, lease, old := attr(":from", "S"), attr(":new_lease", "S"), attr(":lease", "S")
	if from == "" || from != attr(":point", "S") || lease == "" || lease == old || attr(":expires_ms", "N") == attr(":now", "N") {
		return "", "", false
	}
	return old, lease, true
}

// noteRecord notes that the idempotency record of the request tagged tg is
// item pk.
func (p *dynamoProxy) noteRecord(tg tag, pk string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records[tg] = pk
}

// recordOf returns the item of the idempotency record of the request
// tagged tg; false before it has been written.
func (p *dynamoProxy) recordOf(tg tag) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pk, ok := p.records[tg]
	return pk, ok
}

func (p *dynamoProxy) takeoversOf(pk string) *takeoverLog {
	l := p.takeovers[pk]
	if l == nil {
		l = &takeoverLog{tries: map[string]map[string]bool{}, winners: map[string]map[string]bool{}}
		p.takeovers[pk] = l
	}
	return l
}

// tryTakeover notes a try to take item pk's lease old over with lease.
func (p *dynamoProxy) tryTakeover(pk, old, lease string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.takeoversOf(pk)
	if l.tries[old] == nil {
		l.tries[old] = map[string]bool{}
	}
	l.tries[old][lease] = true
}

// tookOver notes that a takeover of item pk's lease old with lease
// succeeded.
func (p *dynamoProxy) tookOver(pk, old, lease string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.takeoversOf(pk)
	l.won = append(l.won, p.clock())
	if l.winners[old] == nil {
		l.winners[old] = map[string]bool{}
	}
	l.winners[old][lease] = true
}

// takeoverCounts sums up the takeovers of the run's keys: how many keys
// saw one succeed, and of those how many had two requests or more in
// flight when it did (the winner and at least one rival), how many keys
// saw two requests or more try to take one abandoned lease over (a race
// for the lease, which all but one of them lose), and on how many keys
// two of them won it (never: the run fails, see checker.finish; the plant
// unfenced-takeover makes it happen).
type takeoverCounts struct {
	tries, won, keysWon, overlapped, contested, twoOwners int
	// twoOwnerKeys are the items of the keys counted in twoOwners.
	twoOwnerKeys []string
}

func (t takeoverCounts) String() string {
	return fmt.Sprintf("takeovers %d tried, %d won; keys with a takeover %d, with 2+ requests in flight at one %d, with 2+ requests racing to take one lease over %d, with 2 winners of one lease %d",
		t.tries, t.won, t.keysWon, t.overlapped, t.contested, t.twoOwners)
}

// takeovers counts the run's takeovers (see takeoverCounts).
func (c *checker) takeovers() takeoverCounts {
	c.mu.Lock()
	ops := c.ops
	c.mu.Unlock()
	byPK := map[string][]*op{}
	for _, o := range ops {
		if pk, ok := c.px.recordOf(o.part.variants[o.variant].tag); ok && !o.probe {
			byPK[pk] = append(byPK[pk], o)
		}
	}
	c.px.mu.Lock()
	defer c.px.mu.Unlock()
	var n takeoverCounts
	for pk, l := range c.px.takeovers {
		contested := false
		for _, leases := range l.tries {
			n.tries += len(leases)
			contested = contested || len(leases) > 1
		}
		if contested {
			n.contested++
		}
		for _, w := range l.winners {
			if len(w) > 1 {
				n.twoOwners++
				n.twoOwnerKeys = append(n.twoOwnerKeys, pk)
				break
			}
		}
		n.won += len(l.won)
		if len(l.won) == 0 {
			continue
		}
		n.keysWon++
		for _, at := range l.won {
			running := 0
			for _, o := range byPK[pk] {
				if o.call <= at && at <= o.ret {
					running++
				}
			}
			if running >= 2 {
				n.overlapped++
				break
			}
		}
	}
	return n
}

// ownerKeys wraps the provider simulator for the plant owner-forward-key:
// the Idempotency-Key of an order's charge gets the lease token its
// idempotency record holds when the call arrives (the caller's own, unless
// it is a zombie) appended, and the answer names the key the caller sent
// (the client checks it), as if the caller had derived that key itself.
func (c *checker) ownerKeys(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pl := c.px.plant.Load()
		if pl == nil || !pl.ownerKey || r.Method != http.MethodPost || r.URL.Path != "/v1/charges" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		lease := c.leaseOfCharge(r.Context(), body)
		if lease == "" {
			next.ServeHTTP(w, r)
			return
		}
		sent := r.Header.Get("Idempotency-Key")
		planted := sent + "." + lease
		r.Header.Set("Idempotency-Key", planted)
		c.px.planted.Add(1)
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		answer := bytes.ReplaceAll(rec.Body.Bytes(), []byte(planted), []byte(sent))
		maps.Copy(w.Header(), rec.Header())
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(answer)
	})
}

// leaseOfCharge returns the lease token of the idempotency record of the
// order whose charge body is; "" when it is no order's or has none.
func (c *checker) leaseOfCharge(ctx context.Context, body []byte) string {
	tg, ok := tagInJSON(body)
	if !ok || tg.endpoint != "orders" {
		return ""
	}
	pk, ok := c.px.recordOf(tg)
	if !ok {
		return ""
	}
	out, err := c.sys.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(c.sys.cfg.Table("IdempotencyTable")),
		Key:            map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return ""
	}
	lease, _ := out.Item[dynamo.AttrLeaseToken].(*types.AttributeValueMemberS)
	if lease == nil {
		return ""
	}
	return lease.Value
}

// TestTakeoverOf checks which Advance calls the proxy counts as takeovers.
func TestTakeoverOf(t *testing.T) {
	update := func(from, point, lease, newLease, expires, now string) map[string]any {
		values := map[string]any{
			":point": map[string]any{"S": point}, ":lease": map[string]any{"S": lease},
			":new_lease":  map[string]any{"S": newLease},
			":expires_ms": map[string]any{"N": expires}, ":now": map[string]any{"N": now},
		}
		if from != "" {
			values[":from"] = map[string]any{"S": from}
		}
		return map[string]any{"ExpressionAttributeValues": values}
	}
	tests := []struct {
		name string
		op   string
		req  map[string]any
		want bool
	}{
		{"takeover", "UpdateItem", update("order_created", "order_created", "old", "new", "2000", "1000"), true},
		{"pause: the new lease has run out", "UpdateItem", update("order_created", "order_created", "old", "new", "1000", "1000"), false},
		{"a phase under its own lease", "UpdateItem", update("order_created", "charge_created", "old", "old", "2000", "1000"), false},
		{"a phase that keeps its point", "UpdateItem", update("order_created", "order_created", "old", "old", "2000", "1000"), false},
		{"the first point", "UpdateItem", update("", "order_created", "old", "new", "2000", "1000"), false},
		{"a phase with effects", "TransactWriteItems", update("order_created", "order_created", "old", "new", "2000", "1000"), false},
		{"no values", "UpdateItem", map[string]any{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, lease, got := takeoverOf(tt.op, tt.req)
			if got != tt.want {
				t.Fatalf("takeoverOf = %q, %q, %v; want %v", old, lease, got, tt.want)
			}
			if got && (old != "old" || lease != "new") {
				t.Errorf("takeoverOf = %q, %q; want old, new", old, lease)
			}
		})
	}
}
