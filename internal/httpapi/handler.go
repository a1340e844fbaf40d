package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/payments"
)

// Routes served by the handler.
const (
	RouteCreatePayment = "POST /v1/payments"
	RouteGetPayment    = "GET /v1/payments/{id}"
	RouteCreateCharge  = "POST /v1/charges"
)

// PaymentReader reads payments; *payments.Table is one.
type PaymentReader interface {
	// Get returns tenant's payment id, or an error wrapping
	// payments.ErrNotFound or payments.ErrUnavailable.
	Get(ctx context.Context, tenant, id string) (payments.Payment, error)
}

// Deps are the handler's dependencies.
type Deps struct {
	// Middleware is the idempotency middleware; build it with WriteError as
	// its OnError. Required.
	Middleware *idempotency.Middleware
	// Payments reads payments. Required.
	Payments PaymentReader
	// PaymentsTable is the name of the table new payments are written to.
	// Required.
	PaymentsTable string
	// Logger receives one line per request (slog.Default when nil).
	Logger *slog.Logger
	// Metrics receives the idempotency outcome counters (none when nil).
	Metrics *metrics.Emitter
	// Now returns the current time, for the payments' created field
	// (time.Now when nil).
	Now func() time.Time
	// Provider is the payment provider POST /v1/charges charges. When nil,
	// the route is still served but answers 503 provider_unavailable once the
	// request is validated, reserving nothing.
	Provider Provider
	// ProviderTimeout bounds each provider call (no bound but the provider
	// client's own when zero). It must be shorter than the idempotency
	// lease, so that a call that times out still owns its reservation when
	// it records the unknown outcome.
	ProviderTimeout time.Duration
	// Fault enables crash injection through the Once-Fault header.
	Fault bool
	// Tenant returns the caller's tenant (gateway.Tenant when nil).
	Tenant func(*http.Request) (string, bool)
}

// NewHandler returns the API. It panics when a required dependency is
// missing.
func NewHandler(d Deps) http.Handler {
	if d.Middleware == nil || d.Payments == nil || d.PaymentsTable == "" {
		panic("httpapi: NewHandler needs Middleware, Payments and PaymentsTable")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Tenant == nil {
		d.Tenant = gateway.Tenant
	}
	h := &handler{deps: d, mux: http.NewServeMux()}
	h.mux.Handle(RouteCreatePayment, d.Middleware.Wrap(idempotency.Atomic, RouteCreatePayment, http.HandlerFunc(h.createPayment)))
	h.mux.HandleFunc(RouteGetPayment, h.getPayment)
	h.mux.Handle(RouteCreateCharge, d.Middleware.Wrap(idempotency.External, RouteCreateCharge, http.HandlerFunc(h.createCharge)))
	h.next = fault.Middleware(d.Fault, http.HandlerFunc(h.route))
	return h
}

type handler struct {
	deps Deps
	mux  *http.ServeMux
	next http.Handler // fault injection, then route
}

// requestInfo is what the handler's middleware learns about one request.
type requestInfo struct {
	id      string
	pattern string
	obs     idempotency.Observation
	err     error // an internal error noted by WriteError
	// providerCalls and providerLatency count the calls to the payment
	// provider.
	providerCalls   int
	providerLatency time.Duration
}

type infoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(infoKey{}).(*requestInfo)
	return info
}

// ServeHTTP runs the request and then writes its log line and metrics, also
// when an injected crash unwinds through it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	info := &requestInfo{}
	if id, ok := gateway.RequestID(r); ok {
		info.id = id
	} else {
		info.id = newRequestID()
	}
	_, info.pattern = h.mux.Handler(r)
	ctx := idempotency.WithObservation(context.WithValue(r.Context(), infoKey{}, info), &info.obs)
	r = r.WithContext(ctx)
	w.Header().Set("Request-Id", info.id)
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		crash, isCrash := fault.AsCrash(v)
		switch {
		case v == nil:
			h.observe(r, info, sw.status, time.Since(start), "")
		case isCrash:
			h.observe(r, info, http.StatusInternalServerError, time.Since(start), crash.Point)
			panic(v)
		default:
			h.observe(r, info, http.StatusInternalServerError, time.Since(start), "panic")
			panic(v)
		}
	}()
	h.next.ServeHTTP(sw, r)
}

// route answers unknown routes and methods with problems, and hands the rest
// to the mux.
func (h *handler) route(w http.ResponseWriter, r *http.Request) {
	info := infoFrom(r.Context())
	if info.pattern != "" {
		h.mux.ServeHTTP(w, r)
		return
	}
	info.obs.Outcome = idempotency.OutcomeRejected
	// Ask the mux what it would answer (404, or 405 with Allow) and say it
	// as a problem.
	fallback, _ := h.mux.Handler(r)
	probe := &statusWriter{ResponseWriter: discard{header: http.Header{}}}
	fallback.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		if allow := probe.Header().Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		WriteError(w, r, ErrMethodNotAllowed)
		return
	}
	WriteError(w, r, ErrNotFound)
}

// observe writes the request's log line and metrics.
func (h *handler) observe(r *http.Request, info *requestInfo, status int, took time.Duration, crash string) {
	if status == 0 {
		status = http.StatusOK
	}
	obs := &info.obs
	tenant, _ := h.deps.Tenant(r)
	attrs := []slog.Attr{
		slog.String("request_id", info.id),
		slog.String("tenant", tenant),
		slog.String("method", r.Method),
		slog.String("route", info.pattern),
		slog.Int("status", status),
		slog.String("outcome", obs.Outcome),
		slog.String("key", obs.Key),
		slog.Int("store_calls", obs.StoreCalls),
		slog.Float64("store_latency_ms", ms(obs.StoreLatency)),
		slog.Float64("duration_ms", ms(took)),
	}
	if info.providerCalls > 0 {
		attrs = append(attrs,
			slog.Int("provider_calls", info.providerCalls),
			slog.Float64("provider_latency_ms", ms(info.providerLatency)))
	}
	switch {
	case obs.Err != "":
		attrs = append(attrs, slog.String("error", obs.Err))
	case info.err != nil:
		attrs = append(attrs, slog.String("error", info.err.Error()))
	}
	if crash != "" {
		attrs = append(attrs, slog.String("crash", crash))
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	h.deps.Logger.LogAttrs(r.Context(), level, "request", attrs...)
	if name := outcomeMetrics[obs.Outcome]; name != "" && obs.Route != "" {
		h.deps.Metrics.Count(name)
	}
}

// outcomeMetrics names the counter of each idempotency outcome.
var outcomeMetrics = map[string]string{
	idempotency.OutcomeCreated:    "reserve_created",
	idempotency.OutcomeReplayed:   "reserve_replayed",
	idempotency.OutcomeInProgress: "reserve_in_progress",
	idempotency.OutcomeMismatch:   "reserve_key_misuse",
	idempotency.OutcomeStoreError: "reserve_store_error",
}

// OutcomeRead is the outcome logged for a read (GET).
const OutcomeRead = "read"

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// discard is a ResponseWriter that keeps only headers.
type discard struct{ header http.Header }

func (d discard) Header() http.Header         { return d.header }
func (d discard) Write(p []byte) (int, error) { return len(p), nil }
func (d discard) WriteHeader(int)             {}
