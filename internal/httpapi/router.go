package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/metrics"
)

// Route is one endpoint: a ServeMux pattern ("POST /v1/payments",
// "GET /v1/payments/{id}") and its handler, made idempotent by the
// idempotency middleware when it changes state.
type Route struct {
	// Pattern is the route's ServeMux pattern; it names the route in logs.
	Pattern string
	// Handler serves it.
	Handler http.Handler
}

// Deps are the router's dependencies.
type Deps struct {
	// Routes are the endpoints served. Required.
	Routes []Route
	// Tenant returns the caller's tenant, as the authorizer established it.
	// Required.
	Tenant func(*http.Request) (string, bool)
	// Logger receives one line per request (slog.Default when nil).
	Logger *slog.Logger
	// Metrics receives the idempotency outcome counters (none when nil).
	Metrics *metrics.Emitter
	// Fault enables crash injection through the Once-Fault header.
	Fault bool
}

// NewHandler returns the API: the routes behind one ServeMux, any other path
// answered 404 and any other method on a known path 405 (with Allow), both as
// problems, and one log line and the metrics of every request. It panics
// when Routes or Tenant is missing or a pattern is invalid or repeated, as
// http.ServeMux does.
func NewHandler(d Deps) http.Handler {
	if len(d.Routes) == 0 || d.Tenant == nil {
		panic("httpapi: NewHandler needs Routes and Tenant")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	h := &handler{deps: d, mux: http.NewServeMux()}
	for _, rt := range d.Routes {
		h.mux.Handle(rt.Pattern, rt.Handler)
	}
	h.next = fault.Middleware(d.Fault, http.HandlerFunc(h.route))
	return h
}

type handler struct {
	deps Deps
	mux  *http.ServeMux
	next http.Handler // fault injection, then route
}

// requestInfo is what the router learns about one request.
type requestInfo struct {
	id       string
	pattern  string
	tenant   string
	tenantOK bool
	obs      idempotency.Observation
	err      error // an error noted by WriteError
	// calls and callLatency count the calls to other systems (NoteCall).
	calls       int
	callLatency time.Duration
}

type infoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(infoKey{}).(*requestInfo)
	return info
}

// Tenant returns the caller's tenant as the router's Deps.Tenant established
// it, for handlers that serve reads (the idempotency middleware finds the
// tenant itself). It is false outside the router or without a tenant.
func Tenant(r *http.Request) (string, bool) {
	if info := infoFrom(r.Context()); info != nil {
		return info.tenant, info.tenantOK
	}
	return "", false
}

// NoteRead marks the request as a read (GET) of route for its log line.
func NoteRead(r *http.Request) {
	if info := infoFrom(r.Context()); info != nil {
		info.obs.Route, info.obs.Outcome, info.obs.Tenant = info.pattern, OutcomeRead, info.tenant
	}
}

// NoteStoreCall adds one store round trip of duration d to the request's log
// line, for reads outside the idempotency middleware.
func NoteStoreCall(r *http.Request, d time.Duration) {
	if info := infoFrom(r.Context()); info != nil {
		info.obs.StoreCalls++
		info.obs.StoreLatency += d
	}
}

// NoteCall adds one call to another system (a payment provider) of duration
// d to the request's log line.
func NoteCall(r *http.Request, d time.Duration) {
	if info := infoFrom(r.Context()); info != nil {
		info.calls++
		info.callLatency += d
	}
}

// ServeHTTP runs the request and then writes its log line and metrics, also
// when an injected crash unwinds through it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	info := &requestInfo{}
	if id, ok := apigw.RequestID(r); ok {
		info.id = id
	} else {
		info.id = newRequestID()
	}
	_, info.pattern = h.mux.Handler(r)
	info.tenant, info.tenantOK = h.deps.Tenant(r)
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
	tenant := info.tenant
	if tenant != "" && idempotency.ValidateTenant(tenant) != nil {
		// Refused (403 tenant_invalid): never log any of it (it may be a
		// name or an e-mail address); the error gives its length and a
		// SHA-256 prefix.
		tenant = ""
	}
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
	if obs.CacheHit {
		attrs = append(attrs, slog.Bool("cache_hit", true))
	}
	if info.calls > 0 {
		attrs = append(attrs,
			slog.Int("provider_calls", info.calls),
			slog.Float64("provider_latency_ms", ms(info.callLatency)))
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
	if status >= 500 || obs.Outcome == idempotency.OutcomeInvalidTenant || errors.Is(info.err, idempotency.ErrTenantInvalid) {
		// A 5xx, or a tenant the deployment's tenant function got wrong.
		level = slog.LevelError
	}
	h.deps.Logger.LogAttrs(r.Context(), level, "request", attrs...)
	switch {
	case obs.Outcome == idempotency.OutcomeInvalidTenant || errors.Is(info.err, idempotency.ErrTenantInvalid):
		// A POST the middleware refused, or a GET ServeGet refused.
		h.deps.Metrics.Count(MetricTenantInvalid)
	case outcomeMetrics[obs.Outcome] != "" && obs.Route != "":
		h.deps.Metrics.Count(outcomeMetrics[obs.Outcome])
	}
}

// MetricTenantInvalid counts the requests refused 403 tenant_invalid (a
// tenant outside idempotency's tenant rule, from the deployment's tenant
// function), POST and GET alike. Alarmed (template.yaml's
// TenantInvalidAlarm): the tenant function needs fixing.
const MetricTenantInvalid = "tenant_invalid"

// outcomeMetrics names the counter of each idempotency outcome.
var outcomeMetrics = map[string]string{
	idempotency.OutcomeCreated:    "reserve_created",
	idempotency.OutcomeRefused:    "reserve_refused",
	idempotency.OutcomeReplayed:   "reserve_replayed",
	idempotency.OutcomeInProgress: "reserve_in_progress",
	idempotency.OutcomeMismatch:   "reserve_key_misuse",
	idempotency.OutcomeStoreError: "reserve_store_error",
	// Alarmed (template.yaml): an answer stored without its effects.
	idempotency.OutcomeEffectsDropped: "reserve_effects_dropped",
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
