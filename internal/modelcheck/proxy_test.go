package modelcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The DynamoDB JSON protocol names the operation in X-Amz-Target.
const (
	targetHeader   = "X-Amz-Target"
	dynamoDBTarget = "DynamoDB_20120810."
)

// dataPlane are the operations on items whose calls may fail.
var dataPlane = map[string]bool{
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "GetItem": true,
	"TransactWriteItems": true, "Query": true,
}

// A plant is a bug the proxy plants in once by rewriting a condition of the
// writes that carry it into another that uses the same expression names and
// values (DynamoDB rejects unused ones) but means something else. It applies
// to PutItem and to the puts and updates of TransactWriteItems.
type plant struct {
	from, to string
}

// plants, by name.
var plants = map[string]plant{
	// The lease-fenced completion (idempotency/dynamo's leaseCondition) no
	// longer checks the token: a zombie's completion overwrites a newer
	// owner's reservation.
	"unfenced-completion": {
		from: "#lease = :lease AND #status <> :completed",
		to:   "(#lease = :lease OR :lease = :lease) AND #status <> :completed",
	},
	// The reclaim condition (reclaimCondition) takes any record that is not
	// IN_PROGRESS for free, expired or not: a completed key executes again.
	"reclaim-completed": {
		from: "attribute_not_exists(#pk) OR (#expires_ms <= :now AND (#status <> :in_progress OR #external = :false))",
		to:   "attribute_not_exists(#pk) OR ((#expires_ms <= :now OR #status <> :in_progress) AND (#status <> :in_progress OR #external = :false))",
	},
	// A refund's hold (internal/refunds' holds) no longer checks what is
	// left of the payment: refunds of different keys can together hold
	// more than the payment, and the provider, not once, refuses the
	// excess.
	"refund-over-hold": {
		from: "#status = :succeeded AND #refundable >= :amount AND attribute_not_exists(#holds.#key)",
		to:   "#status = :succeeded AND (#refundable >= :amount OR :amount = :amount) AND attribute_not_exists(#holds.#key)",
	},
}

// faultKind is what the proxy does to a call.
type faultKind uint8

const (
	faultNone     faultKind = iota
	faultThrottle           // answered 400 ThrottlingException, not forwarded
	faultError              // answered 500 InternalServerError, not forwarded
	faultDrop               // forwarded, then answered 500: the write may have landed
	faultDelay              // held, then forwarded
	faultGated              // held by a gate of a crafted schedule
)

func (k faultKind) String() string {
	return [...]string{"none", "throttle", "error", "drop answer", "delay", "gate"}[k]
}

// window is an outage: from..to after arming, rate of eligible calls fail.
type window struct {
	from, to time.Duration
	rate     float64
}

// proxyEvent is one fault, for the report and the visualization.
type proxyEvent struct {
	at    int64 // the checker's clock
	kind  faultKind
	op    string
	pk    string
	delay time.Duration
}

// gate holds the calls it matches until it is opened (or maxHold passes):
// crafted schedules use it to order writes.
type gate struct {
	match   func(op string, req map[string]any) bool
	open    chan struct{}
	once    sync.Once
	maxHold time.Duration
	held    atomic.Int32
	// applyLate makes a call whose caller hangs up while held go through
	// anyway once the gate opens (its answer discarded): a system that
	// applies a request its client gave up on, as providers do.
	applyLate bool
}

func newGate(maxHold time.Duration, match func(op string, req map[string]any) bool) *gate {
	return &gate{match: match, open: make(chan struct{}), maxHold: maxHold}
}

// release lets the held calls, and all later ones, through.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) isOpen() bool {
	select {
	case <-g.open:
		return true
	default:
		return false
	}
}

// dynamoProxy is a reverse proxy in front of DynamoDB Local that injects
// store faults into the data-plane calls on some tables, on a seeded
// schedule. It can also plant a bug (see plants) and hold calls
// at gates. Stream calls and other tables pass untouched.
type dynamoProxy struct {
	target string
	tables map[string]bool
	clock  func() int64
	client *http.Client
	srv    *http.Server
	url    string

	mu         sync.Mutex
	rng        *rand.Rand
	armedAt    time.Time // zero: no random faults
	windows    []window
	background float64
	minDelay   time.Duration
	maxDelay   time.Duration
	gates      []*gate
	events     []proxyEvent

	plant   atomic.Pointer[plant]
	planted atomic.Int32 // conditions rewritten
}

// startProxy serves a proxy to target on a free port of 127.0.0.1.
func startProxy(target string, seed uint64, clock func() int64) (*dynamoProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	p := &dynamoProxy{
		target: strings.TrimRight(target, "/"),
		tables: map[string]bool{},
		clock:  clock,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		url:    "http://" + ln.Addr().String(),
		rng:    rand.New(rand.NewPCG(seed, 0x5ca1ab1e)),
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// close stops the proxy.
func (p *dynamoProxy) close() error {
	err := p.srv.Close()
	p.client.CloseIdleConnections()
	return err
}

// faultTables sets the tables whose data-plane calls may fail.
func (p *dynamoProxy) faultTables(names ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range names {
		p.tables[n] = true
	}
}

// arm starts the fault schedule: outages windows of 200-900ms within span,
// failing rate of the eligible calls, and background of them outside any
// window (dropped answers and delays only). Delays last from minDelay to
// maxDelay.
func (p *dynamoProxy) arm(span time.Duration, outages int, rate, background float64, minDelay, maxDelay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.windows = nil
	for range outages {
		length := time.Duration(200+p.rng.IntN(700)) * time.Millisecond
		from := time.Duration(p.rng.Int64N(int64(max(span-length, 1))))
		p.windows = append(p.windows, window{from: from, to: from + length, rate: rate})
	}
	p.background = background
	p.minDelay, p.maxDelay = minDelay, maxDelay
	p.armedAt = time.Now()
}

// disarm stops injecting random faults.
func (p *dynamoProxy) disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armedAt = time.Time{}
}

// addGate installs g.
func (p *dynamoProxy) addGate(g *gate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gates = append(p.gates, g)
}

// faultEvents returns the faults injected so far.
func (p *dynamoProxy) faultEvents() []proxyEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxyEvent(nil), p.events...)
}

func (p *dynamoProxy) note(e proxyEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.at = p.clock()
	p.events = append(p.events, e)
}

// decide draws the fault for an eligible call.
func (p *dynamoProxy) decide() (faultKind, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armedAt.IsZero() {
		return faultNone, 0
	}
	since := time.Since(p.armedAt)
	delay := func() time.Duration {
		return p.minDelay + time.Duration(p.rng.Int64N(int64(max(p.maxDelay-p.minDelay, 1))))
	}
	for _, w := range p.windows {
		if since < w.from || since >= w.to || p.rng.Float64() >= w.rate {
			continue
		}
		switch n := p.rng.IntN(10); {
		case n < 4:
			return faultThrottle, 0
		case n < 7:
			return faultError, 0
		case n < 9:
			return faultDrop, 0
		default:
			return faultDelay, delay()
		}
	}
	if p.rng.Float64() < p.background {
		if p.rng.IntN(2) == 0 {
			return faultDrop, 0
		}
		return faultDelay, delay()
	}
	return faultNone, 0
}

// ServeHTTP proxies one call.
func (p *dynamoProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	op, isDynamoDB := strings.CutPrefix(r.Header.Get(targetHeader), dynamoDBTarget)
	if !isDynamoDB || !dataPlane[op] {
		p.forward(w, r, body)
		return
	}
	var req map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		p.forward(w, r, body)
		return
	}
	if pl := p.plant.Load(); pl != nil && (op == "PutItem" || op == "TransactWriteItems") && pl.rewrite(req) {
		p.planted.Add(1)
		body, _ = json.Marshal(req)
	}
	pk := itemKey(req)
	if !p.hold(r, op, req, pk, body) {
		return // the caller hung up while held
	}
	if !p.eligible(req) {
		p.forward(w, r, body)
		return
	}
	kind, delay := p.decide()
	if kind != faultNone {
		p.note(proxyEvent{kind: kind, op: op, pk: pk, delay: delay})
	}
	switch kind {
	case faultThrottle:
		writeDynamoDBError(w, http.StatusBadRequest, "ThrottlingException", "Rate of requests exceeds the allowed throughput.")
	case faultError:
		writeDynamoDBError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected).")
	case faultDrop:
		if resp, err := p.roundTrip(r, body); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		writeDynamoDBError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected after the call).")
	case faultDelay:
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		p.forward(w, r, body)
	default:
		p.forward(w, r, body)
	}
}

// hold waits at the gates that match the call; false when the caller hung
// up meanwhile.
func (p *dynamoProxy) hold(r *http.Request, op string, req map[string]any, pk string, body []byte) bool {
	p.mu.Lock()
	gates := append([]*gate(nil), p.gates...)
	p.mu.Unlock()
	for _, g := range gates {
		if g.isOpen() || !g.match(op, req) {
			continue
		}
		g.held.Add(1)
		p.note(proxyEvent{kind: faultGated, op: op, pk: pk})
		t := time.NewTimer(g.maxHold)
		select {
		case <-g.open:
		case <-t.C:
		case <-r.Context().Done():
			if g.applyLate {
				late := r.Clone(context.WithoutCancel(r.Context()))
				go func() {
					defer t.Stop()
					select {
					case <-g.open:
					case <-t.C:
					}
					if resp, err := p.roundTrip(late, body); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}()
				return false
			}
			t.Stop()
			return false
		}
		t.Stop()
	}
	return true
}

// eligible reports whether the call touches a table whose calls may fail.
func (p *dynamoProxy) eligible(req map[string]any) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range tableNames(req) {
		if p.tables[t] {
			return true
		}
	}
	return false
}

func (p *dynamoProxy) roundTrip(r *http.Request, body []byte) (*http.Response, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	out.Header.Del("Content-Length")
	out.ContentLength = int64(len(body))
	return p.client.Do(out)
}

func (p *dynamoProxy) forward(w http.ResponseWriter, r *http.Request, body []byte) {
	resp, err := p.roundTrip(r, body)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller is gone
		}
		http.Error(w, "proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// writeDynamoDBError answers as DynamoDB does, in its JSON protocol.
func writeDynamoDBError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{
		"__type":  "com.amazonaws.dynamodb.v20120810#" + code,
		"message": message,
	})
}

// rewrite replaces the condition pl.from of a PutItem, or of the puts of a
// TransactWriteItems, with pl.to; it reports whether it replaced one.
func (pl *plant) rewrite(req map[string]any) bool {
	replace := func(m map[string]any) bool {
		if c, _ := m["ConditionExpression"].(string); c == pl.from {
			m["ConditionExpression"] = pl.to
			return true
		}
		return false
	}
	done := replace(req)
	items, _ := req["TransactItems"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			for _, action := range []string{"Put", "Update"} {
				if w, ok := m[action].(map[string]any); ok && replace(w) {
					done = true
				}
			}
		}
	}
	return done
}

// tableNames lists the tables a call touches.
func tableNames(req map[string]any) []string {
	var names []string
	if t, ok := req["TableName"].(string); ok {
		names = append(names, t)
	}
	items, _ := req["TransactItems"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		for _, action := range m {
			if a, ok := action.(map[string]any); ok {
				if t, ok := a["TableName"].(string); ok {
					names = append(names, t)
				}
			}
		}
	}
	return names
}

// itemKey is the pk of the (first) item a call names, "" when none.
func itemKey(req map[string]any) string {
	pkOf := func(m map[string]any) string {
		for _, field := range []string{"Item", "Key"} {
			if item, ok := m[field].(map[string]any); ok {
				if pk, ok := item["pk"].(map[string]any); ok {
					if s, ok := pk["S"].(string); ok {
						return s
					}
				}
			}
		}
		return ""
	}
	if pk := pkOf(req); pk != "" {
		return pk
	}
	items, _ := req["TransactItems"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		for _, action := range m {
			if a, ok := action.(map[string]any); ok {
				if pk := pkOf(a); pk != "" {
					return pk
				}
			}
		}
	}
	return ""
}

// itemString is the string attribute name of the item a PutItem writes.
func itemString(req map[string]any, name string) string {
	item, _ := req["Item"].(map[string]any)
	attr, _ := item[name].(map[string]any)
	s, _ := attr["S"].(string)
	return s
}
