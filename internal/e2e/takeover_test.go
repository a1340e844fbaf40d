package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/orders"
)

// takeoverGate is an HTTP client for the DynamoDB SDK that, once armed,
// holds lease takeovers (an UpdateItem writing a new lease token, which is
// what a retry taking over an abandoned multi-step request sends first)
// until want of them have arrived, or until its deadline, then lets them
// all go at once: want retries race to take one lease over, each having
// read the abandoned record, whatever the machine's load.
type takeoverGate struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	mu      sync.Mutex
	want    int
	arrived int
	open    chan struct{}
}

// arm makes the gate hold the next want takeovers.
func (g *takeoverGate) arm(want int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.want, g.arrived, g.open = want, 0, make(chan struct{})
}

// held returns how many takeovers the gate held since it was last armed.
func (g *takeoverGate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived
}

func (g *takeoverGate) Do(r *http.Request) (*http.Response, error) {
	if open := g.hold(r); open != nil {
		select {
		case <-open:
		case <-time.After(20 * time.Second): // a retry that never got here: the race is reported, not hung
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return g.next.Do(r)
}

// hold returns the channel a takeover waits on; nil for any other call, or
// when the gate is not armed.
func (g *takeoverGate) hold(r *http.Request) chan struct{} {
	if r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.UpdateItem" || r.Body == nil {
		return nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || !bytes.Contains(body, []byte(`":new_lease"`)) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil || g.arrived >= g.want {
		return nil
	}
	g.arrived++
	open := g.open
	if g.arrived == g.want {
		close(g.open)
	}
	return open
}

// option installs the gate in the function's DynamoDB client.
func (g *takeoverGate) option() stackOption {
	return func(setup *stackSetup) {
		setup.client = func(t testing.TB, base *dynamodb.Client) *dynamodb.Client {
			return dynamodb.New(base.Options(), func(o *dynamodb.Options) {
				g.next = o.HTTPClient
				o.HTTPClient = g
			})
		}
	}
}

// providerCharges returns the IDs of the charges the provider simulator
// holds for the order whose metadata names ref, whatever key they were
// created under.
func (s *stack) providerCharges(t testing.TB, ref string) []string {
	t.Helper()
	type item struct {
		Kind     string            `dynamodbav:"kind"`
		ID       string            `dynamodbav:"id"`
		Metadata map[string]string `dynamodbav:"metadata"`
	}
	var ids []string
	for _, it := range scan[item](t, s, s.names.ByLogicalID["ProviderTable"]) {
		if it.Kind == "charge" && it.Metadata["order"] == ref {
			ids = append(ids, it.ID)
		}
	}
	return ids
}

// TestOrdersTakeoverRaceChargesOnce is the regression test of an order
// charged again by every retry that takes its lease over (the model check's
// plant owner-forward-key: the charge forwarded under a key that changes
// with the lease token). An order dies once its charge was sent (a crash
// after the provider call, or a provider call that times out), its lease
// runs out, and two retries race to take it over (both held at the
// takeover until both have read the abandoned record) and resume it at
// order_created: the provider holds one charge for the order, whatever key
// it came under, and every 201 for the key, the race's and the replays',
// is the same bytes, naming that charge.
func TestOrdersTakeoverRaceChargesOnce(t *testing.T) {
	const racers = 2
	gate := &takeoverGate{}
	s := newStack(t, withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	}), gate.option())
	tests := []struct {
		name   string
		source string
		fault  string
		first  int // the status of the request that died, when it did not crash
	}{
		{"crash after the provider call", "tok_visa", "after-provider-call", 0},
		{"provider call timed out", "tok_timeout", "", http.StatusGatewayTimeout},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, ref := fmt.Sprintf("order-takeover-%d", i), fmt.Sprintf("takeover-%d", i)
			body := fmt.Sprintf(`{"amount": 4200, "currency": "EUR", "customer": "cus_42", "email": "ada@example.com", "metadata": {"order": %q}, "source": %q}`, ref, tt.source)
			var header map[string][]string
			if tt.fault != "" {
				header = map[string][]string{"Once-Fault": {tt.fault}}
			}
			switch r := s.order(t, "acme", key, body, header); {
			case tt.fault != "":
				wantCrash(t, r, tt.fault)
			case r.status != tt.first:
				t.Fatalf("first POST = %d %s, want %d", r.status, r.body, tt.first)
			}
			if n := len(s.providerCharges(t, ref)); n != 1 {
				t.Fatalf("provider charges after the first request = %d, want 1 (its call was sent)", n)
			}
			rec, err := s.record(t, key)
			if err != nil || rec.Point != orders.PointOrderCreated {
				t.Fatalf("record at %q, %v; want abandoned at %s", rec.Point, err, orders.PointOrderCreated)
			}

			s.clock.Advance(s.cfg.Lease + time.Second)
			gate.arm(racers)
			answers := make([]response, racers)
			var wg sync.WaitGroup
			for n := range racers {
				wg.Go(func() { answers[n] = s.order(t, "acme", key, body, nil) })
			}
			wg.Wait()
			if got := gate.held(); got != racers {
				t.Errorf("takeovers raced = %d, want %d", got, racers)
			}
			for n, r := range answers {
				t.Logf("racing retry %d: %s", n, summary(r))
			}
			// Whatever the race left unfinished (a winner that timed
			// out again, under a bug) is retried after its lease, a
			// bounded number of times.
			final := s.order(t, "acme", key, body, nil)
			for range 3 {
				if final.status == http.StatusCreated {
					break
				}
				s.clock.Advance(s.cfg.Lease + time.Second)
				final = s.order(t, "acme", key, body, nil)
				t.Logf("retry after the lease: %s", summary(final))
			}
			ids := s.providerCharges(t, ref)
			if len(ids) != 1 {
				t.Errorf("provider charges for the order = %d %v, want 1", len(ids), ids)
			}
			if final.status != http.StatusCreated {
				t.Fatalf("final answer = %s, want 201", summary(final))
			}
			if got := decode(t, final)["charge"]; len(ids) == 0 || got != ids[0] {
				t.Errorf("answer names charge %v, want the provider's %v", got, ids)
			}
			created := 0
			for n, r := range answers {
				switch r.status {
				case http.StatusCreated:
					created++
					if !bytes.Equal(r.body, final.body) {
						t.Errorf("retry %d answered %s, the key's answer is %s", n, r.body, final.body)
					}
				case http.StatusConflict:
				default:
					t.Errorf("racing retry %d = %s, want 201 or 409", n, summary(r))
				}
			}
			if created == 0 && final.header.Get("Idempotent-Replayed") == "true" {
				t.Errorf("no retry resumed the order, yet the final answer is a replay")
			}
			wantReplay(t, s.order(t, "acme", key, body, nil), final)
			if o := s.effects(t, key, body, orders.StatusPaid, 1, 1); o.Charge != decode(t, final)["charge"] {
				t.Errorf("order's charge = %s, answer's %v", o.Charge, decode(t, final)["charge"])
			}
		})
	}
}

// summary is an order's answer in a few words: its status and charge, or
// its problem's code.
func summary(r response) string {
	var m map[string]any
	_ = json.Unmarshal(r.body, &m)
	if c, ok := m["code"]; ok {
		return fmt.Sprintf("%d %v", r.status, c)
	}
	return fmt.Sprintf("%d charge %v", r.status, m["charge"])
}
