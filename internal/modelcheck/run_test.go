package modelcheck

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// runConfig shapes one run.
type runConfig struct {
	seed            uint64
	clients         int
	perClient       int           // requests a client starts, at most (its retries included)
	think           time.Duration // a client's mean pause between requests
	history         time.Duration // clients start no request after this
	tenants         []string
	keysPerTenant   int     // used two at a time per tenant, one after the other
	maxVariants     int     // request variants per key, at most
	otherEndpoint   float64 // chance that a variant after the first goes to another endpoint
	lease           time.Duration
	providerTimeout time.Duration
	providerSettle  time.Duration // ONCE_PROVIDER_SETTLE; the provider timeout when zero
	faultRate       float64       // share of requests with a Once-Fault header among those about to execute (see checker.faultRate)
	replayFault     float64       // the same share among the others (replays, 409s and refusals: they reach no fault point)
	retryRate       float64       // chance that a client retries after 409 or 5xx
	spread          float64       // chance that a request draws its variant at random rather than sending the first
	outages         int           // store outage windows during the history
	outageRate      float64       // share of eligible calls that fail in an outage
	background      float64       // share of eligible calls dropped or delayed outside outages
	late            float64       // share of completions that land late, a fifth of it of the other fenced writes (schedule.late)
	// handover plans every key as charges whose first body the provider
	// refuses (nothing happens, so recovery releases the key) and whose
	// other bodies it charges: the interleavings where a key changes hands
	// while a request that had it may still write, which lease fencing is
	// for.
	handover bool
	// only, when set, plans every key on the endpoint of that name, with
	// one to maxVariants bodies of its own (refunds: every key a refund of
	// the tenant's one payment, which cannot cover them all).
	only string
	// settling leaves the refunds' payments pending when the history
	// starts (refunds race the worker's settlement of their payment, and
	// each other), every key in use from its step to the end, and delivers every
	// payment's stream record a second time, at a random moment, to a
	// second worker (an at-least-once delivery racing the first).
	settling bool
	// bursts plans every key as a round of an order whose first request
	// dies mid-way (a crash after a recovery point, or a provider that
	// does not answer in time), then two or three retries at once right
	// after its lease, racing to take it over and resume it (see
	// runBursts), instead of the clients' random requests.
	bursts bool
	// ttl turns DynamoDB Local's TTL on. Off, as on AWS (where TTL takes
	// days), abandoned reservations are recovered by the checker only; on,
	// DynamoDB Local deletes them within seconds and the sweeper's backstop
	// races the checker.
	ttl          bool
	quiet        time.Duration // bound on the wait for quiet
	checkTimeout time.Duration // porcupine's bound per key
}

// boundedConfig is the run of `make test`: about 500 requests in about 12s
// of history.
func boundedConfig(seed uint64) runConfig {
	return runConfig{
		seed:          seed,
		clients:       8,
		perClient:     80,
		think:         150 * time.Millisecond,
		history:       12 * time.Second,
		tenants:       []string{"acme", "globex", "initech"},
		keysPerTenant: 5,
		maxVariants:   3,
		otherEndpoint: 0.3,
		// The provider timeout is close to the lease, so that a store call
		// delayed a few hundred milliseconds makes a zombie.
		lease:           600 * time.Millisecond,
		providerTimeout: 400 * time.Millisecond,
		faultRate:       0.5,
		replayFault:     0.02,
		retryRate:       0.6,
		spread:          0.4,
		outages:         4,
		outageRate:      0.6,
		background:      0.04,
		late:            0.3,
		// A recovery check that failed (a store fault) comes back 60s
		// later, as the CheckQueue's visibility timeout says.
		quiet:        90 * time.Second,
		checkTimeout: 30 * time.Second,
	}
}

// apiKeys are the devstack's demo API keys, one tenant each.
var apiKeys = map[string]string{"acme": "sk_test_acme", "globex": "sk_test_globex", "initech": "sk_test_initech"}

// partition is one (tenant, key) and the request variants sent under it.
type partition struct {
	index    int
	from, to time.Duration // when clients use it, after they start
	tenant   string
	key      string // the Idempotency-Key
	pk       string // its record's pk
	variants []*variant
}

func (p *partition) String() string { return p.tenant + "/" + p.key }

// variant is one request sent under a key.
type variant struct {
	index int
	ep    *endpoint
	body  map[string]any // tags included
	tag   tag
}

func (v *variant) String() string {
	b := v.body
	if p, ok := b["payment"]; ok {
		amount, ok := b["amount"]
		if !ok {
			amount = "all that is left"
		}
		return fmt.Sprintf("v%d %s %v of %v", v.index, v.ep.name, amount, p)
	}
	return fmt.Sprintf("v%d %s %v %v %v", v.index, v.ep.name, b["amount"], b["currency"], b["source"])
}

// op is one request as a client saw it.
type op struct {
	client   int
	part     *partition
	variant  int
	fault    string
	probe    bool
	call     int64
	ret      int64
	status   int
	code     string // the problem's code
	class    answerClass
	replayed bool
	digest   string // of a final answer
	body     []byte
	err      error // a transport error
}

func (o *op) label() string {
	v := o.part.variants[o.variant]
	s := fmt.Sprintf("c%d %s", o.client, v)
	if o.probe {
		s = "probe " + v.String()
	}
	if o.fault != "" {
		s += " Once-Fault: " + o.fault
	}
	return s
}

// kind sums o up for the run's statistics.
func (o *op) kind(lease time.Duration) string {
	s := strconv.Itoa(o.status)
	switch {
	case o.err != nil:
		return "error"
	case o.replayed:
		s += "r"
	case o.code == "idempotency_key_reused":
		s += "reused"
	}
	if o.fault != "" && o.status == http.StatusBadGateway {
		s += "crash"
	}
	if time.Duration(o.ret-o.call) >= lease {
		s += "long"
	}
	return s
}

func (o *op) answerLabel() string {
	if o.err != nil {
		return "transport error"
	}
	s := strconv.Itoa(o.status)
	if o.code != "" {
		s += " " + o.code
	}
	if o.class == classFinal {
		s += " " + o.digest[strings.IndexByte(o.digest, '#'):]
		if o.replayed {
			s += " (replayed)"
		}
	}
	return s
}

// finalRead is a key's record and effects once the system is quiet.
type finalRead struct {
	at      int64
	record  recordState
	status  string // the record's status, "" when absent
	variant int    // the record's variant, -1 unknown
	digest  string
	effects map[int]int // variant: count, over all systems
	foreign []tag       // effects tagged with this key but no variant of it
}

// checker runs one history against a devstack behind a fault proxy and
// checks it.
type checker struct {
	t     *testing.T
	cfg   runConfig
	run   string
	epoch time.Time
	px    *dynamoProxy
	stack *devstack.Stack
	out   *lambdatest.Buffer
	sys   systems
	http  *http.Client
	parts []*partition

	mu  sync.Mutex
	ops []*op
	// decided are the keys some request has seen a replay or an
	// effectful final answer of (stored, or stored by recovery): a request
	// under one replays or is refused, and reaches no fault point. A fresh
	// answer that is not effectful may have been sent unstored (handover's
	// 422 provider_rejected: recovery releases the key).
	decided map[*partition]bool
}

// newChecker starts a devstack whose DynamoDB is a fault proxy in front of
// the test DynamoDB Local. Faults stay off until arm.
func newChecker(t *testing.T, cfg runConfig) *checker {
	t.Helper()
	db := dynamotest.Client(t)
	c := &checker{
		t:     t,
		cfg:   cfg,
		run:   fmt.Sprintf("%d-%s", cfg.seed, randomHex(3)),
		epoch: time.Now(),
		out:   &lambdatest.Buffer{},
		http:  &http.Client{Timeout: 60 * time.Second},

		decided: map[*partition]bool{},
	}
	px, err := startProxy(dynamotest.Endpoint(t), cfg.seed, c.now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.close() })
	c.px = px

	// Tables of the run's own, which the stack creates.
	env := dynamotest.FreshNames(t, db).Env()
	maps.Copy(env, map[string]string{
		"DYNAMODB_ENDPOINT":     px.url,
		"PORT":                  "0",
		"PROVIDER_PORT":         "0",
		"SQS_PORT":              "0",
		"ONCE_DEV_TTL":          map[bool]string{true: "on", false: "off"}[cfg.ttl],
		"LOG_LEVEL":             "info",
		"ONCE_FAULT_INJECTION":  "1",
		"ONCE_LEASE":            cfg.lease.String(),
		"ONCE_PROVIDER_TIMEOUT": cfg.providerTimeout.String(),
		"ONCE_PROVIDER_SETTLE":  max(cfg.providerSettle, cfg.providerTimeout).String(),
		"ONCE_RETENTION":        "24h",
		"ONCE_DEV_API_KEYS":     devAPIKeys(),
	})
	stack, err := devstack.Start(t.Context(), devstack.Options{
		Getenv:       func(k string) string { return env[k] },
		Output:       c.out,
		TemplatePath: dynamotest.TemplatePath(t),
		StateDir:     t.TempDir(),
		WrapProvider: c.ownerKeys,
	})
	if err != nil {
		t.Fatalf("devstack.Start = %v", err)
	}
	t.Cleanup(func() {
		if err := stack.Close(); err != nil {
			t.Errorf("devstack Close = %v", err)
		}
	})
	c.stack = stack
	c.sys = systems{db: db, cfg: stack.Config()}
	// Every table an endpoint writes; not the API keys' nor the
	// simulator's own.
	px.faultTables(c.sys.cfg.Table("IdempotencyTable"), c.sys.cfg.Table("PaymentsTable"), c.sys.cfg.Table("RefundsTable"),
		c.sys.cfg.Table("OrdersTable"), c.sys.cfg.Table("OutboxTable"))
	return c
}

func devAPIKeys() string {
	var pairs []string
	for _, tenant := range slices.Sorted(maps.Keys(apiKeys)) {
		pairs = append(pairs, tenant+":"+apiKeys[tenant])
	}
	return strings.Join(pairs, ",")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// now is the checker's clock: nanoseconds since it started, monotonic.
func (c *checker) now() int64 { return int64(time.Since(c.epoch)) }

// addPartition adds a key of tenant with the given request variants (bodies
// without tags).
func (c *checker) addPartition(tenant, key string, variants ...variantSpec) *partition {
	p := &partition{
		index:  len(c.parts),
		tenant: tenant,
		key:    key,
		pk:     idempotency.NewKey(tenant, key).ID(),
	}
	for i, vs := range variants {
		tg := tag{run: c.run, tenant: tenant, key: key, variant: i, endpoint: vs.ep.name}
		body := make(map[string]any, len(vs.body)+1)
		for k, v := range vs.body {
			body[k] = v
		}
		body["metadata"] = tg.metadata()
		p.variants = append(p.variants, &variant{index: i, ep: vs.ep, body: body, tag: tg})
	}
	c.parts = append(c.parts, p)
	return p
}

// variantSpec is a request variant before it is tagged.
type variantSpec struct {
	ep   *endpoint
	body map[string]any
}

// plan adds keysPerTenant keys to every tenant, the same key values in every
// tenant, each with one to maxVariants variants. Clients use each key for
// two steps of the history, two keys per tenant at a time, so that every key
// sees its first requests race.
func (c *checker) plan(r *mrand.Rand) {
	step := c.cfg.history / time.Duration(c.cfg.keysPerTenant+1)
	for k := range c.cfg.keysPerTenant {
		key := fmt.Sprintf("mc-%s-k%d", c.run, k)
		for _, tenant := range c.cfg.tenants {
			first := endpoints[r.IntN(len(endpoints))]
			n := 1 + r.IntN(c.cfg.maxVariants)
			if c.cfg.handover {
				first = endpoints[slices.IndexFunc(endpoints, func(ep *endpoint) bool { return ep.name == "charges" })]
				n = 2
			}
			if c.cfg.only != "" {
				first = endpoints[slices.IndexFunc(endpoints, func(ep *endpoint) bool { return ep.name == c.cfg.only })]
			}
			if c.cfg.bursts {
				// Mostly one body: a second one only refused (422).
				n = 1 + r.IntN(2)
			}
			specs := make([]variantSpec, 0, n)
			for i := range n {
				ep := first
				if i > 0 && r.Float64() < c.cfg.otherEndpoint && !c.cfg.handover && c.cfg.only == "" {
					ep = endpoints[r.IntN(len(endpoints))]
				}
				// Amounts differ per variant: no two share a fingerprint.
				amount := int64(1000 + 100*i + r.IntN(100))
				body := ep.body(r, amount)
				if c.cfg.handover {
					body = baseBody(r, amount, map[bool]string{true: tokUnknown, false: tokVisa}[i == 0])
				}
				specs = append(specs, variantSpec{ep: ep, body: body})
			}
			p := c.addPartition(tenant, key, specs...)
			p.from, p.to = time.Duration(k)*step, time.Duration(k+2)*step
			if c.cfg.settling {
				// Every key in use from its step to the end: the first
				// ones race the settlement, the later ones its second
				// delivery.
				p.to = c.cfg.history
			}
		}
	}
}

// setup readies the planned variants of every endpoint that needs it
// (refunds: their payments), before the faults are armed.
func (c *checker) setup(ctx context.Context) error {
	for _, ep := range endpoints {
		if ep.setup == nil {
			continue
		}
		var vs []planned
		for _, p := range c.parts {
			for _, v := range p.variants {
				if v.ep == ep {
					vs = append(vs, planned{tenant: p.tenant, v: v})
				}
			}
		}
		if len(vs) == 0 {
			continue
		}
		if err := ep.setup(ctx, c, vs); err != nil {
			return fmt.Errorf("setup of %s: %w", ep.name, err)
		}
	}
	return nil
}

// call sends a request of tenant to the stack, outside the history (setup),
// with an Idempotency-Key when key is set, and returns the answer.
func (c *checker) call(ctx context.Context, method, tenant, path, key, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.stack.URL()+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKeys[tenant])
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// send posts variant v of p, with a Once-Fault header when fault is set, and
// records it. The client numbered probeLane is the prober.
func (c *checker) send(ctx context.Context, client int, p *partition, v int, fault string, r *mrand.Rand) *op {
	va := p.variants[v]
	o := &op{client: client, part: p, variant: v, fault: fault, probe: client == c.probeLane()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.stack.URL()+va.ep.path, bytes.NewReader(render(r, va.body)))
	if err != nil {
		panic(err) // a URL of the stack's and a constant method
	}
	req.Header.Set("Authorization", "Bearer "+apiKeys[p.tenant])
	req.Header.Set("Idempotency-Key", p.key)
	req.Header.Set("Content-Type", "application/json")
	if fault != "" {
		req.Header.Set("Once-Fault", fault)
	}
	o.call = c.now()
	resp, err := c.http.Do(req)
	if err == nil {
		o.body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	o.ret = c.now()
	if err != nil {
		o.err, o.class = err, classFailed
	} else {
		o.status = resp.StatusCode
		o.replayed = resp.Header.Get(idempotency.ReplayedHeader) == "true"
		o.code = problemCode(resp.Header.Get("Content-Type"), o.body)
		o.class = classify(o.status, o.code)
		o.digest = digest(o.status, resp.Header, o.body)
	}
	c.mu.Lock()
	c.ops = append(c.ops, o)
	if o.class == classFinal && (o.replayed || va.ep.effectful(o.status)) {
		c.decided[p] = true
	}
	c.mu.Unlock()
	return o
}

// faultRate is the chance that a client's request under p carries a
// Once-Fault header: high when the request is about to execute, and may
// crash at its fault point (p is not decided, and its record, read from
// DynamoDB Local directly, is absent or a reservation whose lease has run
// out, which the request takes over or hands to recovery), low otherwise
// (see runConfig.faultRate and checker.decided).
func (c *checker) faultRate(ctx context.Context, p *partition) float64 {
	c.mu.Lock()
	decided := c.decided[p]
	c.mu.Unlock()
	if decided {
		return c.cfg.replayFault
	}
	if rec, found := c.record(ctx, p); found && (rec.Status == idempotency.StatusCompleted || time.Now().Before(rec.ExpiresAt)) {
		return c.cfg.replayFault
	}
	return c.cfg.faultRate
}

// classify tells what an answer says about the key.
func classify(status int, code string) answerClass {
	switch {
	case status == http.StatusConflict:
		return classInProgress
	case status == http.StatusUnprocessableEntity && code == "idempotency_key_reused":
		return classReused
	case status >= 500:
		return classFailed
	}
	return classFinal
}

func problemCode(contentType string, body []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt != "application/problem+json" {
		return ""
	}
	var p struct{ Code string }
	_ = json.Unmarshal(body, &p)
	return p.Code
}

// perResponse are the header fields that legitimately differ between an
// answer and its replay: the replay mark (Idempotent-Replayed), the time of
// sending (Date), the framing, derived from the body the digest covers
// (Content-Length) or hop-by-hop, and the request IDs of the router
// (Request-Id) and of API Gateway (X-Amzn-Requestid), which name each
// request, not its answer. idempotency does not store the first three
// either.
var perResponse = map[string]bool{
	idempotency.ReplayedHeader: true, "Date": true,
	"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Request-Id": true, "X-Amzn-Requestid": true,
}

// digest identifies an answer as a replay must reproduce it: status, every
// header field but the perResponse ones (names canonical, values in order:
// Set-Cookie lines apart, other fields as the one line they are sent as),
// and body bytes.
func digest(status int, h http.Header, body []byte) string {
	sum := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if perResponse[http.CanonicalHeaderKey(k)] {
			continue
		}
		fmt.Fprintf(sum, "%s\x00%q\x00", http.CanonicalHeaderKey(k), h[k])
	}
	sum.Write([]byte{0})
	sum.Write(body)
	return fmt.Sprintf("%d #%s", status, hex.EncodeToString(sum.Sum(nil))[:8])
}

// runClients runs the random clients until each has started perClient
// requests or the history's time is up.
func (c *checker) runClients(ctx context.Context) {
	start := time.Now()
	deadline := start.Add(c.cfg.history)
	active := func() []*partition {
		since := time.Since(start)
		var ps []*partition
		for _, p := range c.parts {
			if since >= p.from && since < p.to {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			return c.parts
		}
		return ps
	}
	var wg sync.WaitGroup
	for i := range c.cfg.clients {
		r := mrand.New(mrand.NewPCG(c.cfg.seed, uint64(i)+1))
		wg.Go(func() {
			sleep := func(d time.Duration) {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
			for n := 0; n < c.cfg.perClient && time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				ps := active()
				p := ps[r.IntN(len(ps))]
				v := 0
				if r.Float64() < c.cfg.spread {
					v = r.IntN(len(p.variants))
				}
				fault := ""
				if ep := p.variants[v].ep; r.Float64() < c.faultRate(ctx, p) {
					fault = ep.faults[r.IntN(len(ep.faults))]
				}
				o := c.send(ctx, i, p, v, fault, r)
				for o.class == classInProgress || o.class == classFailed {
					if n++; n >= c.cfg.perClient || !time.Now().Before(deadline) || r.Float64() >= c.cfg.retryRate {
						break
					}
					sleep(time.Duration(50+r.IntN(400)) * time.Millisecond)
					o = c.send(ctx, i, p, v, "", r)
				}
				sleep(time.Duration(r.Int64N(int64(2 * c.cfg.think))))
			}
		})
	}
	wg.Wait()
}

// quietFor is how long nothing may be pending for the system to count as
// quiet: a reservation DynamoDB's TTL has just deleted leaves nothing
// pending until the sweeper, run from the stream (whose idle poller reads
// every 2s), restores it as UNKNOWN.
const quietFor = 4 * time.Second

// waitQuiet waits until no record is IN_PROGRESS or UNKNOWN, no payment
// is pending and no endpoint has work left in the background (receipts to
// send), for quietFor, or the bound passes; it returns what is still
// pending then.
func (c *checker) waitQuiet(ctx context.Context, bound time.Duration) []string {
	deadline := time.Now().Add(bound)
	var since time.Time // nothing pending since
	for {
		pending, err := c.pending(ctx)
		if err != nil {
			return []string{err.Error()}
		}
		switch {
		case len(pending) > 0:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= quietFor:
			return nil
		}
		if time.Now().After(deadline) {
			return pending
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// records reads every idempotency record: the items of the table with a
// status (a large answer's chunks and the sweeper's marks of the REMOVEs it
// handled have none).
func (c *checker) records(ctx context.Context) ([]idempotency.Record, error) {
	items, err := scan(ctx, c.sys.db, c.sys.cfg.Table("IdempotencyTable"))
	if err != nil {
		return nil, err
	}
	recs := make([]idempotency.Record, 0, len(items))
	for _, item := range items {
		if _, ok := item[dynamo.AttrStatus]; !ok {
			continue
		}
		rec, err := dynamo.RecordFromItem(item)
		if err != nil {
			return nil, fmt.Errorf("record: %w", err)
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func (c *checker) pending(ctx context.Context) ([]string, error) {
	var out []string
	recs, err := c.records(ctx)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.Status != idempotency.StatusCompleted {
			out = append(out, fmt.Sprintf("record %s is %s (updated %s ago)", c.partitionName(rec.Key.ID()), rec.Status, time.Since(rec.UpdatedAt).Round(time.Millisecond)))
		}
	}
	pays, err := scan(ctx, c.sys.db, c.sys.cfg.Table("PaymentsTable"))
	if err != nil {
		return nil, err
	}
	for _, item := range pays {
		if s := stringAttr(item, "status"); s == "pending" {
			out = append(out, "payment "+stringAttr(item, "id")+" is pending")
		}
	}
	for _, ep := range endpoints {
		if ep.pending == nil {
			continue
		}
		more, err := ep.pending(ctx, c.sys)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	return out, nil
}

func (c *checker) partitionName(pk string) string {
	for _, p := range c.parts {
		if p.pk == pk {
			return p.String()
		}
	}
	return pk
}

// readFinal reads every key's record and effects.
func (c *checker) readFinal(ctx context.Context) (map[*partition]*finalRead, error) {
	at := c.now()
	reads := map[*partition]*finalRead{}
	byPK := map[string]*partition{}
	for _, p := range c.parts {
		reads[p] = &finalRead{at: at, record: recordAbsent, variant: -1, effects: map[int]int{}}
		byPK[p.pk] = p
	}
	recs, err := c.records(ctx)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		p := byPK[rec.Key.ID()]
		if p == nil {
			continue
		}
		f := reads[p]
		f.status = string(rec.Status)
		if rec.Status != idempotency.StatusCompleted || rec.Response == nil {
			f.record = recordPending
			continue
		}
		f.record = recordCompleted
		resp := rec.Response
		h := http.Header{}
		resp.SetHeader(h)
		f.digest = digest(resp.Status, h, resp.Body)
		// External records keep their request; Atomic answers are the
		// payment, with its metadata.
		tg, ok := tagInJSON(rec.Request)
		if !ok {
			tg, ok = tagInJSON(resp.Body)
		}
		if ok && tg.run == c.run {
			f.variant = tg.variant
		}
	}
	for _, ep := range endpoints {
		counts, err := ep.effects(ctx, c.sys)
		if err != nil {
			return nil, err
		}
		for tg, n := range counts {
			if tg.run != c.run {
				continue
			}
			p := c.partitionOf(tg)
			switch {
			case p == nil:
				continue
			case tg.variant < 0 || tg.variant >= len(p.variants) || p.variants[tg.variant].ep != ep:
				reads[p].foreign = append(reads[p].foreign, tg)
			default:
				reads[p].effects[tg.variant] += n
			}
		}
	}
	return reads, nil
}

func (c *checker) partitionOf(tg tag) *partition {
	for _, p := range c.parts {
		if p.tenant == tg.tenant && p.key == tg.key {
			return p
		}
	}
	return nil
}

// probe sends every variant of every completed key once more, without
// faults: the stored variant must be replayed, the others refused.
func (c *checker) probe(ctx context.Context, reads map[*partition]*finalRead) {
	r := mrand.New(mrand.NewPCG(c.cfg.seed, 0x9e0be))
	for _, p := range c.parts {
		if reads[p].record != recordCompleted {
			continue
		}
		for v := range p.variants {
			c.send(ctx, c.probeLane(), p, v, "", r)
		}
	}
}

// result is what a run found.
type result struct {
	seed       uint64
	requests   int
	operations int // porcupine operations, final reads included
	faults     map[faultKind]int
	answers    map[string]int // answers by status and kind
	endpoints  map[string]int // requests by endpoint
	// faulted and crashed count the requests with a Once-Fault header
	// and those of them that crashed (502), by endpoint and fault point
	// ("charges/after_reserve").
	faulted, crashed map[string]int
	quiet            time.Duration // the wait for quiet
	violations       []string
	files            []string
}

func (r *result) ok() bool { return len(r.violations) == 0 }

func (r *result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d requests %v, %d operations checked, answers %v, store faults %v, %s, quiet after %v",
		r.seed, r.requests, r.endpoints, r.operations, r.answers, r.faults, r.crashes(), r.quiet.Round(100*time.Millisecond))
	if r.ok() {
		return b.String()
	}
	fmt.Fprintf(&b, "\n%d violation(s) (replay the choices with MODELCHECK_SEED=%d):", len(r.violations), r.seed)
	for _, v := range r.violations {
		b.WriteString("\n  - " + v)
	}
	for _, f := range r.files {
		b.WriteString("\n  see " + f)
	}
	return b.String()
}

// crashes sums up the injected crashes: how many requests crashed of how
// many carried a Once-Fault header, then crashed/sent per endpoint and
// fault point.
func (r *result) crashes() string {
	crashed, faulted := 0, 0
	pairs := make([]string, 0, len(r.faulted))
	for _, k := range slices.Sorted(maps.Keys(r.faulted)) {
		crashed, faulted = crashed+r.crashed[k], faulted+r.faulted[k]
		pairs = append(pairs, fmt.Sprintf("%s:%d/%d", k, r.crashed[k], r.faulted[k]))
	}
	return fmt.Sprintf("crashes %d of %d Once-Fault requests [%s]", crashed, faulted, strings.Join(pairs, " "))
}

// crashCount is how many requests crashed at an injected fault.
func (r *result) crashCount() int {
	n := 0
	for _, c := range r.crashed {
		n += c
	}
	return n
}

// finish stops the faults, waits for quiet, reads the final state, probes,
// and checks the history and the invariants.
func (c *checker) finish(ctx context.Context) *result {
	c.px.disarm()
	c.px.landLate()
	res := &result{
		seed: c.cfg.seed, faults: map[faultKind]int{}, answers: map[string]int{}, endpoints: map[string]int{},
		faulted: map[string]int{}, crashed: map[string]int{},
	}
	for _, e := range c.px.faultEvents() {
		res.faults[e.kind]++
	}
	quiet := c.cfg.quiet
	if c.answersBad() {
		// The run fails already: it need not wait as long for what is
		// still pending (stuck keys then read as stuck sooner).
		quiet = min(quiet, failedQuiet)
	}
	quietFrom := time.Now()
	stuck := c.waitQuiet(ctx, quiet)
	res.quiet = time.Since(quietFrom)
	for _, s := range stuck {
		res.violations = append(res.violations, fmt.Sprintf("not quiet %v after the last request: %s", quiet, s))
	}
	reads, err := c.readFinal(ctx)
	if err != nil {
		res.violations = append(res.violations, "final read: "+err.Error())
		return res
	}
	c.probe(ctx, reads)

	c.mu.Lock()
	ops := slices.Clone(c.ops)
	c.mu.Unlock()
	res.requests = len(ops)
	for _, o := range ops {
		res.answers[o.kind(c.cfg.lease)]++
		res.endpoints[o.part.variants[o.variant].ep.name]++
		if o.fault != "" {
			pair := o.part.variants[o.variant].ep.name + "/" + o.fault
			res.faulted[pair]++
			if o.status == http.StatusBadGateway {
				res.crashed[pair]++
			}
		}
	}
	byPart := map[*partition][]*op{}
	for _, o := range ops {
		byPart[o.part] = append(byPart[o.part], o)
	}
	dumps := 0 // histories printed; the rest are in their files
	for _, p := range c.parts {
		res.violations = append(res.violations, c.invariants(p, byPart[p], reads[p])...)
		n, bad, file := c.linearizable(p, byPart[p], reads[p], dumps < 3)
		res.operations += n
		if bad != "" {
			res.violations = append(res.violations, bad)
			dumps++
		}
		if file != "" {
			res.files = append(res.files, file)
		}
	}
	res.violations = append(res.violations, c.workerInvariants(ctx)...)
	for _, pk := range c.takeovers().twoOwnerKeys {
		res.violations = append(res.violations, c.partitionName(pk)+": two takeovers won the same abandoned lease (two owners at once, which the lease fence forbids)")
	}
	for _, ep := range endpoints {
		if ep.audit == nil {
			continue
		}
		bad, err := ep.audit(ctx, c.sys, c.run)
		if err != nil {
			bad = []string{ep.name + " audit: " + err.Error()}
		}
		const most = 10
		if len(bad) > most {
			bad = append(bad[:most], fmt.Sprintf("%s: ... and %d more like these", ep.name, len(bad)-most))
		}
		res.violations = append(res.violations, bad...)
	}
	if !res.ok() {
		if f := c.writeFile("stack.log", []byte(c.out.String())); f != "" {
			res.files = append(res.files, f)
		}
	}
	return res
}

// failedQuiet bounds the wait for quiet of a run whose answers have
// already broken the contract (see answersBad).
const failedQuiet = 15 * time.Second

// answersBad reports whether an answer of the history breaks the contract
// on its own (answerViolations): the run fails whatever the wait for quiet
// finds.
func (c *checker) answersBad() bool {
	c.mu.Lock()
	ops := slices.Clone(c.ops)
	c.mu.Unlock()
	byPart := map[*partition][]*op{}
	for _, o := range ops {
		byPart[o.part] = append(byPart[o.part], o)
	}
	for p, ops := range byPart {
		if len(c.answerViolations(p, ops)) > 0 {
			return true
		}
	}
	return false
}

// answerViolations checks each answer of ops, requests of key p, on its
// own: a transport error, an answer that is not one of its endpoint's, or
// one that carries another request's tags.
func (c *checker) answerViolations(p *partition, ops []*op) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, p.String()+": "+fmt.Sprintf(format, args...))
	}
	for _, o := range ops {
		switch {
		case o.err != nil:
			bad("%s: %v", o.label(), o.err)
		case o.class == classFinal && c.cfg.settling && o.code == codeNotRefundable && p.variants[o.variant].ep.name == "refunds":
			if v := c.notRefundable(p, o); v != "" {
				bad("%s", v)
			}
		case o.class == classFinal && !p.variants[o.variant].ep.expects(o.status, o.code):
			what := o.code
			if what == "" {
				what = string(o.body)
			}
			bad("%s: unexpected answer %d %s", o.label(), o.status, what)
		case o.class == classFinal:
			if tg, ok := tagInJSON(o.body); ok && tg != p.variants[o.variant].tag {
				bad("%s: the answer carries another request's tags %+v: %s", o.label(), tg, o.body)
			}
		}
	}
	return out
}

// invariants checks what is stated directly rather than through the model.
func (c *checker) invariants(p *partition, ops []*op, f *finalRead) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, p.String()+": "+fmt.Sprintf(format, args...))
	}
	out = append(out, c.answerViolations(p, ops)...)
	var effected []int
	for v, n := range f.effects {
		if n > 1 {
			bad("%d effects of %s (at most one per key)", n, p.variants[v])
		}
		if n > 0 {
			effected = append(effected, v)
		}
	}
	slices.Sort(effected)
	if len(effected) > 1 {
		bad("effects of %d requests under one key: variants %v", len(effected), effected)
	}
	for _, tg := range f.foreign {
		bad("an effect tagged %+v, which no request under the key made", tg)
	}
	switch f.record {
	case recordCompleted:
		for _, v := range effected {
			if f.variant >= 0 && v != f.variant {
				bad("the effect of %s exists, but the stored answer is v%d's", p.variants[v], f.variant)
			}
		}
		for _, o := range ops {
			if o.class == classFinal && o.variant == f.variant && o.digest != f.digest {
				bad("%s got %s, but the stored answer is %s", o.label(), o.answerLabel(), f.digest)
			}
		}
	case recordAbsent:
		for _, v := range effected {
			bad("the effect of %s exists, but the key has no record", p.variants[v])
		}
	}
	const most = 6
	if len(out) > most {
		out = append(out[:most], fmt.Sprintf("%s: ... and %d more like these", p, len(out)-most))
	}
	return out
}

// workerInvariants: the worker charged every payment once (their sources
// are ones the provider charges, and the system is quiet: none is pending),
// and only payments that exist.
func (c *checker) workerInvariants(ctx context.Context) []string {
	charges, err := providerCharges(ctx, c.sys, "payments")
	if err != nil {
		return []string{"provider charges: " + err.Error()}
	}
	payments, err := taggedItems(ctx, c.sys.db, c.sys.cfg.Table("PaymentsTable"), nil)
	if err != nil {
		return []string{"payments: " + err.Error()}
	}
	var out []string
	for tg, n := range charges {
		if tg.run != c.run {
			continue
		}
		if n > 1 {
			out = append(out, fmt.Sprintf("the worker charged %+v %d times", tg, n))
		}
		if payments[tg] == 0 {
			out = append(out, fmt.Sprintf("the worker charged %+v, which has no payment", tg))
		}
	}
	for tg := range payments {
		if tg.run == c.run && charges[tg] == 0 {
			out = append(out, fmt.Sprintf("the worker never charged the payment of %+v", tg))
		}
	}
	return out
}

// Porcupine lanes: one per client, then the probes, then the reservations
// of each client's requests, then the final read.
func (c *checker) probeLane() int           { return c.cfg.clients }
func (c *checker) enterLane(client int) int { return c.cfg.clients + 1 + client }
func (c *checker) auditLane() int           { return 2*c.cfg.clients + 2 }

// history turns p's requests and final read into porcupine operations.
func (c *checker) history(p *partition, ops []*op, f *finalRead) []porcupineOp {
	var h []porcupineOp
	end := f.at - 1
	late := c.px.lateLandings(p.pk)
	for id, o := range ops {
		va := p.variants[o.variant]
		ret := o.ret
		if o.err != nil {
			ret = max(ret, end) // its effect may land any time before quiet
		}
		// A write of its variant sent while it ran may be its own, landed
		// after it answered (its answer unstored, or a 5xx).
		for _, l := range late {
			if l.variant == o.variant && l.sent >= o.call && l.sent <= o.ret {
				ret = max(ret, l.at+1)
			}
		}
		in := opInput{
			kind:     kindRequest,
			id:       id,
			variant:  o.variant,
			external: va.ep.external,
			resumes:  va.ep.resumes,
			long:     time.Duration(o.ret-o.call) >= c.cfg.lease-20*time.Millisecond,
			label:    o.label(),
		}
		out := opOutput{
			class:     o.class,
			replayed:  o.replayed,
			answer:    o.digest,
			effectful: o.class == classFinal && va.ep.effectful(o.status),
			label:     o.answerLabel(),
		}
		lane := o.client
		if o.probe {
			lane = c.probeLane()
		}
		h = append(h, porcupineOp{client: lane, in: in, out: out, call: o.call, ret: ret})
		mayReserve := out.class == classFinal && !o.replayed || out.class == classFailed || in.long
		if va.ep.external && mayReserve && !o.probe {
			enter := in
			enter.kind = kindEnter
			h = append(h, porcupineOp{client: c.enterLane(o.client), in: enter, call: o.call, ret: ret})
		}
	}
	var eff uint32
	dup := false
	for v, n := range f.effects {
		if n > 0 {
			eff |= bit(v)
		}
		dup = dup || n > 1
	}
	label := "no record"
	switch f.record {
	case recordCompleted:
		label = fmt.Sprintf("COMPLETED v%d %s", f.variant, f.digest)
	case recordPending:
		label = f.status
	}
	label += ", effects " + describeEffects(eff)
	if dup || len(f.foreign) > 0 {
		label += " (duplicates)"
		dup = true
	}
	h = append(h, porcupineOp{
		client: c.auditLane(),
		in:     opInput{kind: kindAudit, label: "final read"},
		out: opOutput{
			record: f.record, recordVariant: f.variant, answer: f.digest,
			effects: eff, duplicates: dup, label: label,
		},
		call: f.at, ret: f.at + 1,
	})
	return h
}

// writeFile writes data under the output directory as <run>-name and
// returns its path ("" when it could not).
func (c *checker) writeFile(name string, data []byte) string {
	dir := os.Getenv("MODELCHECK_OUT")
	if dir == "" {
		dir = filepath.Join(filepath.Dir(dynamotest.TemplatePath(c.t)), ".cache", "modelcheck")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Logf("modelcheck: %v", err)
		return ""
	}
	path := filepath.Join(dir, c.run+"-"+name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		c.t.Logf("modelcheck: %v", err)
		return ""
	}
	return path
}

// TestDigest checks which differences between two answers digest tells
// apart: every header field an answer carries but the perResponse ones, and
// the stored answer as a replay sends it.
func TestDigest(t *testing.T) {
	body := []byte(`{"id":"pay_1"}`)
	base := http.Header{
		"Content-Type":  {"application/json"},
		"Location":      {"/v1/payments/pay_1"},
		"Cache-Control": {"no-store"},
		"Set-Cookie":    {"a=1", "b=2"},
	}
	with := func(k string, v ...string) http.Header {
		h := base.Clone()
		if v == nil {
			h.Del(k)
		} else {
			h[k] = v
		}
		return h
	}
	stored := http.Header{}
	idempotency.Response{
		Status: 201, Body: body, SetCookie: []string{"a=1", "b=2"},
		Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/pay_1", "Cache-Control": "no-store"},
	}.SetHeader(stored)
	tests := []struct {
		name   string
		status int
		h      http.Header
		body   []byte
		same   bool
	}{
		{"the stored answer", 201, stored, body, true},
		{"a replay", 201, with(idempotency.ReplayedHeader, "true"), body, true},
		{"another Date", 201, with("Date", "Wed, 25 Nov 2026 16:00:00 GMT"), body, true},
		{"another request's IDs", 201, with("Request-Id", "req_2"), body, true},
		{"another API Gateway request ID", 201, with("X-Amzn-Requestid", "r2"), body, true},
		{"Content-Length", 201, with("Content-Length", "14"), body, true},
		{"another status", 200, base, body, false},
		{"another body", 201, base, []byte(`{"id":"pay_2"}`), false},
		{"another Content-Type", 201, with("Content-Type", "text/plain"), body, false},
		{"another Location", 201, with("Location", "/v1/payments/pay_2"), body, false},
		{"no Cache-Control", 201, with("Cache-Control"), body, false},
		{"another Cache-Control", 201, with("Cache-Control", "no-cache"), body, false},
		{"a Retry-After", 201, with("Retry-After", "1"), body, false},
		{"a Set-Cookie lost", 201, with("Set-Cookie", "a=1"), body, false},
		{"Set-Cookie lines reordered", 201, with("Set-Cookie", "b=2", "a=1"), body, false},
		{"Set-Cookie lines joined", 201, with("Set-Cookie", "a=1, b=2"), body, false},
	}
	want := digest(201, base, body)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := digest(tt.status, tt.h, tt.body); (got == want) != tt.same {
				t.Errorf("digest = %s, base's %s; want the same: %v", got, want, tt.same)
			}
		})
	}
}
