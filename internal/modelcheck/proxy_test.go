package modelcheck

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
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
// to PutItem and to the puts and updates of TransactWriteItems, or to the
// operations it names; with takeover, to takeovers only (see takeoverOf).
// A plant with ownerKey rewrites no condition: it changes the forwarded
// keys of the orders' charges at the provider instead (see ownerKeys).
type plant struct {
	from, to string
	ops      []string // the operations it rewrites; PutItem and TransactWriteItems when nil
	takeover bool
	ownerKey bool
}

// applies reports whether pl rewrites call req of op.
func (pl *plant) applies(op string, req map[string]any) bool {
	switch {
	case pl.from == "":
		return false
	case pl.takeover:
		_, _, ok := takeoverOf(op, req)
		return ok
	case pl.ops == nil:
		return op == "PutItem" || op == "TransactWriteItems"
	}
	return slices.Contains(pl.ops, op)
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
	// The reclaim condition (reclaimCondition) takes a COMPLETED record for
	// free, expired or not: a completed key executes again.
	"reclaim-completed": {
		from: "attribute_not_exists(#pk) OR (#expires_ms <= :now AND (#status = :completed OR #status = :in_progress AND #external = :false))",
		to:   "attribute_not_exists(#pk) OR ((#expires_ms <= :now OR #status = :completed) AND (#status = :completed OR #status = :in_progress AND #external = :false))",
	},
	// A refund's hold (internal/refunds' holds) no longer checks what is
	// left of the payment: refunds of different keys can together hold
	// more than the payment, and the provider, not once, refuses the
	// excess.
	"refund-over-hold": {
		from: "#status = :succeeded AND #refundable >= :amount AND attribute_not_exists(#holds.#key)",
		to:   "#status = :succeeded AND (#refundable >= :amount OR :amount = :amount) AND attribute_not_exists(#holds.#key)",
	},
	// The worker's settlement (payments.Table.Settle) no longer checks that
	// the payment is still pending: a redelivered or retried record of a
	// payment settled already settles it again, and resets what is left to
	// refund, the holds of the refunds in flight and the amount refunded.
	"resettle": {
		from: "#status = :pending",
		to:   "(#status = :pending OR :pending = :pending)",
		ops:  []string{"UpdateItem"},
	},
	// A takeover of an abandoned multi-step request (idempotency's
	// Call.takeOver, an Advance from its recovery point to the same point
	// under a new token) no longer checks the abandoned lease token: two
	// retries that read the same abandoned lease both take it over, two
	// owners at once. Only takeovers are rewritten; the phases' own
	// Advances stay fenced.
	"unfenced-takeover": {
		from:     "#lease = :lease AND #status <> :completed AND #status = :status AND #external = :external AND #point = :from",
		to:       "(#lease = :lease OR :lease = :lease) AND #status <> :completed AND #status = :status AND #external = :external AND #point = :from",
		takeover: true,
	},
	// An order's charge is forwarded to the provider under a key derived
	// from its request's lease token as well (Steps.ForwardKey with the
	// token in it): stable within one owner's attempt, another key after
	// every takeover, so a phase resumed by a retry or the reconciler
	// after its provider call is a second charge.
	"owner-forward-key": {ownerKey: true},
}

// settleCondition is the condition of the worker's settlement of a payment
// (payments.Table.Settle).
const settleCondition = "#status = :pending"

// faultKind is what the proxy does to a call.
type faultKind uint8

const (
	faultNone        faultKind = iota
	faultThrottle              // answered 400 ThrottlingException, not forwarded
	faultError                 // answered 500 InternalServerError, not forwarded
	faultDrop                  // forwarded, then answered 500: the write may have landed
	faultDelay                 // held, then forwarded
	faultGated                 // held by a gate of a crafted schedule
	faultLate                  // a lease-fenced write held until another body takes its key (schedule.late)
	faultPartitioned           // a retry of a late write, held until the late one has landed
)

func (k faultKind) String() string {
	return [...]string{"none", "throttle", "error", "drop answer", "delay", "gate", "late", "partitioned retry"}[k]
}

// fenceClause is the part of idempotency/dynamo's lease conditions that a
// late write is chosen by: every write fenced on a lease token (completion,
// release, recovery point, UNKNOWN) carries it.
const fenceClause = "#lease = :lease"

// reserveClause starts the condition of a write that takes a key
// (idempotency/dynamo's reclaimCondition: a reservation or an Atomic
// commit).
const reserveClause = "attribute_not_exists(#pk)"

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

	mu      sync.Mutex
	rng     *rand.Rand
	armedAt time.Time // zero: no random faults
	windows []window
	sched   schedule
	gates   []*gate
	events  []proxyEvent
	// partitions are the late writes not landed yet, by the SHA-256 of
	// their body (an SDK retry sends the same bytes): closed once landed.
	partitions map[[sha256.Size]byte]chan struct{}
	inFlight   sync.WaitGroup // late writes not landed yet
	// waiters are the late writes waiting for their item to be taken by
	// another body, by item.
	waiters  map[string][]waiter
	landings []landing // late writes that succeeded

	// settled bounds when each payment (by pk) was first settled (see
	// settlement).
	settled map[string]settlement

	// records is the item (pk) of the idempotency record of each
	// request's tag, noted from the writes that put it.
	records map[tag]string
	// takeovers are the takeovers of abandoned multi-step requests, by
	// item (see takeoverOf).
	takeovers map[string]*takeoverLog

	plant   atomic.Pointer[plant]
	planted atomic.Int32 // conditions (or forwarded keys) rewritten
}

// settlement bounds when a payment was first settled, on the checker's
// clock: it landed in DynamoDB at some instant of [from, by], from the
// earliest time the proxy sent DynamoDB a settlement (settleCondition) that
// succeeded to the earliest time DynamoDB answered one of them. A request
// sent before from found the payment pending, one sent at or after by
// found it settled; in between, either.
type settlement struct{ from, by int64 }

// settlementKey is the context key under which a settlement's call carries
// its payment's pk to roundTrip.
type settlementKey struct{}

// settledWithin notes that a settlement of payment pk sent to DynamoDB at
// sent succeeded, answered at answered.
func (p *dynamoProxy) settledWithin(pk string, sent, answered int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.settled[pk]
	if !ok {
		p.settled[pk] = settlement{from: sent, by: answered}
		return
	}
	p.settled[pk] = settlement{from: min(s.from, sent), by: min(s.by, answered)}
}

// settledSince returns how long after from (the checker's clock) each
// payment settled so far was first settled.
func (p *dynamoProxy) settledSince(from int64) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for _, s := range p.settled {
		out = append(out, time.Duration(s.by-from).Round(100*time.Millisecond))
	}
	slices.Sort(out)
	return out
}

// settledAt returns the bounds of when payment pk was first settled;
// false when it has not been.
func (p *dynamoProxy) settledAt(pk string) (settlement, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.settled[pk]
	return s, ok
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

		partitions: map[[sha256.Size]byte]chan struct{}{},
		waiters:    map[string][]waiter{},
		settled:    map[string]settlement{},
		records:    map[tag]string{},
		takeovers:  map[string]*takeoverLog{},
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

// schedule is a random fault schedule.
type schedule struct {
	span    time.Duration // the outages fall within it
	outages int           // windows of 200-900ms
	rate    float64       // share of the eligible calls that fail in a window
	// background is the share of eligible calls dropped or delayed
	// outside any window; delays last from minDelay to maxDelay.
	background         float64
	minDelay, maxDelay time.Duration
	// late is the share of lease-fenced completions (fenceClause, a record
	// put), and a fifth of it the share of the other lease-fenced writes
	// (release, UNKNOWN, recovery point), that land late, at the worst
	// moment for a write that is not fenced: once a request of another
	// body has taken their item (reserveClause) after takenAfter, or else
	// after minLate to maxLate. They are applied whether or not their
	// caller still waits, as a write already sent can be, while their
	// retries wait until they have landed (a partition that heals).
	late                         float64
	takenAfter, minLate, maxLate time.Duration
}

// arm starts the fault schedule s.
func (p *dynamoProxy) arm(s schedule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.windows = nil
	for range s.outages {
		length := time.Duration(200+p.rng.IntN(700)) * time.Millisecond
		from := time.Duration(p.rng.Int64N(int64(max(s.span-length, 1))))
		p.windows = append(p.windows, window{from: from, to: from + length, rate: s.rate})
	}
	p.sched = s
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
		return p.sched.minDelay + time.Duration(p.rng.Int64N(int64(max(p.sched.maxDelay-p.sched.minDelay, 1))))
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
	if p.rng.Float64() < p.sched.background {
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
	if op == "UpdateItem" && conditioned(req, settleCondition, strings.HasPrefix) {
		r = r.WithContext(context.WithValue(r.Context(), settlementKey{}, itemKey(req)))
	}
	if pl := p.plant.Load(); pl != nil && pl.applies(op, req) && pl.rewrite(req) {
		p.planted.Add(1)
		body, _ = json.Marshal(req)
	}
	pk := itemKey(req)
	if pk != "" && (op == "PutItem" || op == "TransactWriteItems") {
		if tg, ok := writtenTag(body); ok {
			p.noteRecord(tg, pk)
		}
	}
	if old, lease, ok := takeoverOf(op, req); ok && pk != "" {
		p.tryTakeover(pk, old, lease)
		w = &takeWatch{ResponseWriter: w, took: func() { p.tookOver(pk, old, lease) }}
	}
	if !p.hold(r, op, req, pk, body) {
		return // the caller hung up while held
	}
	if landed := p.partitioned(body); landed != nil {
		p.note(proxyEvent{kind: faultPartitioned, op: op, pk: pk})
		select {
		case <-landed:
		case <-r.Context().Done():
			return
		}
		p.forward(w, r, body)
		return
	}
	if !p.eligible(req) {
		p.forward(w, r, body)
		return
	}
	if d, ok := p.decideLate(req, body); ok {
		p.note(proxyEvent{kind: faultLate, op: op, pk: pk, delay: d})
		p.late(w, r, body, pk, d)
		return
	}
	if pk != "" && conditioned(req, reserveClause, strings.HasPrefix) {
		w = &takeWatch{ResponseWriter: w, took: func() { p.took(pk, writtenVariant(body)) }}
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

// takeWatch calls took when the write it answers succeeded.
type takeWatch struct {
	http.ResponseWriter
	took func()
}

func (t *takeWatch) WriteHeader(status int) {
	if status == http.StatusOK {
		t.took()
	}
	t.ResponseWriter.WriteHeader(status)
}

// waiter is a late write waiting for its item to be taken by another body.
type waiter struct {
	variant int // the body the late write puts; -1 when unknown
	taken   chan struct{}
}

// took tells the late writes waiting on item pk that a request of variant
// (-1: unknown) took it: those of another variant, or of an unknown one, go.
func (p *dynamoProxy) took(pk string, variant int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.waiters[pk][:0]
	for _, w := range p.waiters[pk] {
		if w.variant < 0 || variant < 0 || w.variant != variant {
			close(w.taken)
			continue
		}
		kept = append(kept, w)
	}
	p.waiters[pk] = kept
	if len(kept) == 0 {
		delete(p.waiters, pk)
	}
}

// takenBy returns a channel closed when item pk is next taken by a request
// of another variant than variant (see took).
func (p *dynamoProxy) takenBy(pk string, variant int) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := make(chan struct{})
	p.waiters[pk] = append(p.waiters[pk], waiter{variant: variant, taken: ch})
	return ch
}

// forget drops the waiter of channel taken from item pk, if it still
// waits.
func (p *dynamoProxy) forget(pk string, taken chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiters[pk] = slices.DeleteFunc(p.waiters[pk], func(w waiter) bool { return w.taken == taken })
	if len(p.waiters[pk]) == 0 {
		delete(p.waiters, pk)
	}
}

// decideLate draws whether a lease-fenced write lands late, and when at the
// latest.
func (p *dynamoProxy) decideLate(req map[string]any, body []byte) (time.Duration, bool) {
	if !conditioned(req, fenceClause, strings.Contains) {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rate := p.sched.late
	if writtenVariant(body) < 0 {
		// Not a completion: a release or an UNKNOWN held back would hold
		// back the handing on too.
		rate /= 5
	}
	if p.armedAt.IsZero() || p.rng.Float64() >= rate {
		return 0, false
	}
	return p.sched.minLate + time.Duration(p.rng.Int64N(int64(max(p.sched.maxLate-p.sched.minLate, 1)))), true
}

// partitioned returns the channel of the late write body retries, nil when
// there is none in flight.
func (p *dynamoProxy) partitioned(body []byte) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.partitions[sha256.Sum256(body)]
}

// late applies the call once item pk is taken by another body after the
// schedule's takenAfter, or else after d, whether or not its caller still
// waits, and answers the caller if it does. Its retries wait until it has
// landed (partitioned), then go through.
func (p *dynamoProxy) late(w http.ResponseWriter, r *http.Request, body []byte, pk string, d time.Duration) {
	sum := sha256.Sum256(body)
	landed := make(chan struct{})
	p.mu.Lock()
	p.partitions[sum] = landed
	p.mu.Unlock()
	type answer struct {
		status int
		header http.Header
		body   []byte
		err    error
	}
	done := make(chan answer, 1)
	sent, sentAt := r.Clone(context.WithoutCancel(r.Context())), p.clock()
	p.inFlight.Add(1)
	go func() {
		defer p.inFlight.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		p.mu.Lock()
		wait := p.sched.takenAfter
		p.mu.Unlock()
		select {
		case <-time.After(wait):
			taken := p.takenBy(pk, writtenVariant(body))
			select {
			case <-t.C:
				p.forget(pk, taken)
			case <-taken:
			}
		case <-t.C:
		}
		var a answer
		resp, err := p.roundTrip(sent, body)
		if err == nil && resp.StatusCode == http.StatusOK {
			p.landed(landing{pk: pk, sent: sentAt, at: p.clock(), variant: writtenVariant(body)})
		}
		if err == nil {
			a.status, a.header = resp.StatusCode, resp.Header
			a.body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		a.err = err
		p.mu.Lock()
		delete(p.partitions, sum)
		p.mu.Unlock()
		close(landed)
		done <- a
	}()
	select {
	case <-r.Context().Done():
	case a := <-done:
		if a.err != nil {
			http.Error(w, "proxy: "+a.err.Error(), http.StatusBadGateway)
			return
		}
		for k, vs := range a.header {
			w.Header()[k] = vs
		}
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
	}
}

// landing is a late write that succeeded.
type landing struct {
	pk       string
	sent, at int64 // the checker's clock
	variant  int   // of the record it wrote (its stored request's tag); -1 when none
}

func (p *dynamoProxy) landed(l landing) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.landings = append(p.landings, l)
}

// lateLandings returns the late writes that succeeded on item pk.
func (p *dynamoProxy) lateLandings(pk string) []landing {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []landing
	for _, l := range p.landings {
		if l.pk == pk {
			out = append(out, l)
		}
	}
	return out
}

// writtenVariant is the variant of the record a write puts (its own item,
// or its transaction's first put), read from the tag of its stored request;
// -1 when it puts none or the request carries no tag.
func writtenVariant(body []byte) int {
	if tg, ok := writtenTag(body); ok {
		return tg.variant
	}
	return -1
}

// writtenTag is the tag of the request of the record a write puts (see
// writtenVariant); false when it puts none or the request carries no tag.
func writtenTag(body []byte) (tag, bool) {
	var req struct {
		Item          map[string]map[string]any
		TransactItems []struct {
			Put *struct{ Item map[string]map[string]any }
		}
	}
	if json.Unmarshal(body, &req) != nil {
		return tag{}, false
	}
	item := req.Item
	for _, ti := range req.TransactItems {
		if item == nil && ti.Put != nil {
			item = ti.Put.Item
		}
	}
	b64, _ := item["request"]["B"].(string)
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return tag{}, false
	}
	return tagInJSON(raw)
}

// landLate waits until every late write has landed.
func (p *dynamoProxy) landLate() { p.inFlight.Wait() }

// conditioned reports whether match(condition, clause) holds for the
// condition of a write or of an item of its transaction.
func conditioned(req map[string]any, clause string, match func(s, substr string) bool) bool {
	has := func(m map[string]any) bool {
		c, _ := m["ConditionExpression"].(string)
		return match(c, clause)
	}
	if has(req) {
		return true
	}
	items, _ := req["TransactItems"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		for _, action := range m {
			if a, ok := action.(map[string]any); ok && has(a) {
				return true
			}
		}
	}
	return false
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

// roundTrip sends r's call, with body, to DynamoDB Local. A settlement's
// call (one whose context carries settlementKey) goes through even if its
// caller gives up meanwhile, as a write on the wire lands, and when it
// succeeds the proxy notes when it sent it and when DynamoDB answered,
// whatever it then answers the caller (a dropped answer included).
func (p *dynamoProxy) roundTrip(r *http.Request, body []byte) (*http.Response, error) {
	ctx := r.Context()
	pk, settle := ctx.Value(settlementKey{}).(string)
	if settle {
		ctx = context.WithoutCancel(ctx)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	out.Header.Del("Content-Length")
	out.ContentLength = int64(len(body))
	sent := p.clock()
	resp, err := p.client.Do(out)
	if settle && pk != "" && err == nil && resp.StatusCode == http.StatusOK {
		p.settledWithin(pk, sent, p.clock())
	}
	return resp, err
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
