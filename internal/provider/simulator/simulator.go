package simulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of Options.
const (
	DefaultSlowDelay = 3 * time.Second
	DefaultHoldFor   = 30 * time.Second
	DefaultFlakyFor  = 3 * time.Second
	// writeTimeout bounds the recording of a charge, which goes on when the
	// client hangs up: a charge is recorded or not, never cut off midway by
	// the caller.
	writeTimeout = 10 * time.Second
)

// ReplayedHeader marks a replayed answer.
const ReplayedHeader = "Idempotent-Replayed"

// Options configures a Server.
type Options struct {
	// DB holds the simulator's state. Required.
	DB TableAPI
	// Table is the ProviderTable's name. Required.
	Table string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// SlowDelay is how long tok_slow answers take (default 3s).
	SlowDelay time.Duration
	// HoldFor is how long tok_timeout holds its answer, unless the client
	// goes away first (default 30s, longer than API Gateway's 29s).
	HoldFor time.Duration
	// FlakyFor is how long tok_flaky answers 503 after the first request
	// with a key (default 3s).
	FlakyFor time.Duration
	// Logger receives one line per request that reaches a charge (default:
	// discard). Keys are logged as a short hash.
	Logger *slog.Logger
}

// Server is the simulator, an http.Handler. It is safe for concurrent use,
// and any number of Servers may share one table.
type Server struct {
	db        TableAPI
	table     string
	now       func() time.Time
	slowDelay time.Duration
	holdFor   time.Duration
	flakyFor  time.Duration
	log       *slog.Logger
	mux       *http.ServeMux
}

// New returns a Server for opts. It panics when DB or Table is missing.
func New(opts Options) *Server {
	if opts.DB == nil || opts.Table == "" {
		panic("simulator: Options.DB and Options.Table are required")
	}
	s := &Server{
		db:        opts.DB,
		table:     opts.Table,
		now:       opts.Now,
		slowDelay: opts.SlowDelay,
		holdFor:   opts.HoldFor,
		flakyFor:  opts.FlakyFor,
		log:       opts.Logger,
		mux:       http.NewServeMux(),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.slowDelay <= 0 {
		s.slowDelay = DefaultSlowDelay
	}
	if s.holdFor <= 0 {
		s.holdFor = DefaultHoldFor
	}
	if s.flakyFor <= 0 {
		s.flakyFor = DefaultFlakyFor
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mux.HandleFunc("POST /v1/charges", s.create)
	s.mux.HandleFunc("GET /v1/charges", s.lookupByKey)
	s.mux.HandleFunc("GET /v1/charges/{id}", s.lookupByID)
	s.mux.HandleFunc("GET /v1/_test/charges", s.count)
	s.mux.HandleFunc("POST /v1/refunds", s.createRefund)
	s.mux.HandleFunc("GET /v1/refunds", s.listRefunds)
	s.mux.HandleFunc("POST /v1/messages", s.send)
	s.mux.HandleFunc("GET /v1/messages", s.messages)
	return s
}

// ServeHTTP serves the simulator's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	key, err := parseKey("Idempotency-Key", r.Header.Values("Idempotency-Key"))
	if err != nil {
		s.invalid(w, err)
		return
	}
	req, b, err := parseChargeRequest(w, r)
	if err != nil {
		s.invalid(w, err)
		return
	}
	log := s.log.With("key", shortKey(key), "source", req.Source)
	// The write goes on when the client hangs up; see writeTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), writeTimeout)
	defer cancel()

	if b == unavailable || b == flaky {
		// Nothing is charged or recorded, but a key already used for a
		// charge must not be told "not charged".
		existing, found, err := s.get(ctx, key)
		switch {
		case err != nil:
			s.unknown(w, log, "charge", err)
			return
		case found:
			s.replay(w, log, existing, paramsHash(req))
			return
		}
		if b == flaky {
			first, err := s.firstSeen(ctx, key)
			if err != nil {
				s.unknown(w, log, "charge", err)
				return
			}
			if !s.now().Before(first.Add(s.flakyFor)) {
				b = succeed // the outage is over
			}
		}
		if b != succeed {
			log.Info("simulator: unavailable", "outcome", "unavailable")
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, encode(errorBody{Error: apiError{
				Type: "api_error", Code: "provider_unavailable",
				Message: "The provider is unavailable; nothing was charged. Retry later.",
			}}))
			return
		}
	}

	c, created, err := s.record(ctx, key, func() charge { return newCharge(key, req, b, s.now()) })
	if err != nil {
		s.unknown(w, log, "charge", err)
		return
	}
	if !created {
		s.replay(w, log, c, paramsHash(req))
		return
	}
	log.Info("simulator: charge", "outcome", "created", "charge", c.ID, "status", c.Status)
	switch b {
	case hold:
		_ = sleep(r.Context(), s.holdFor)
	case slow:
		_ = sleep(r.Context(), s.slowDelay)
	}
	// Answer even when the client went away: behind API Gateway or a
	// function URL, an empty answer would read as a 200.
	writeJSON(w, c.ResponseStatus, c.ResponseBody)
}

// replay answers a request for a key that already has a charge: the recorded
// answer when the parameters match, 422 otherwise.
func (s *Server) replay(w http.ResponseWriter, log *slog.Logger, c charge, params string) {
	s.replayAnswer(w, log.With("charge", c.ID, "status", c.Status), "charge", c.Params == params, c.ResponseStatus, c.ResponseBody)
}

// replayAnswer answers a request for a key that already has a charge or a
// refund (what): its recorded answer when the parameters match (same),
// 422 otherwise.
func (s *Server) replayAnswer(w http.ResponseWriter, log *slog.Logger, what string, same bool, status int, body []byte) {
	if !same {
		log.Info("simulator: key reused", "outcome", "key_reused")
		writeJSON(w, http.StatusUnprocessableEntity, encode(errorBody{Error: apiError{
			Type: "idempotency_error", Code: "idempotency_key_reused",
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with.",
		}}))
		return
	}
	log.Info("simulator: "+what, "outcome", "replayed")
	w.Header().Set(ReplayedHeader, "true")
	writeJSON(w, status, body)
}

// unknown answers 500 after a DynamoDB error: the charge (or refund: what)
// may or may not have been recorded.
func (s *Server) unknown(w http.ResponseWriter, log *slog.Logger, what string, err error) {
	log.Error("simulator: store error", "outcome", "error", "err", err)
	writeJSON(w, http.StatusInternalServerError, encode(errorBody{Error: apiError{
		Type: "api_error", Code: "internal_error",
		Message: "An error occurred; the " + what + " may or may not have been made. Look it up by its idempotency key.",
	}}))
}

func (s *Server) lookupByKey(w http.ResponseWriter, r *http.Request) {
	key, err := parseKey("idempotency_key", r.URL.Query()["idempotency_key"])
	if err != nil {
		s.invalid(w, err)
		return
	}
	c, found, err := s.get(r.Context(), key)
	s.found(w, c, found, err)
}

func (s *Server) lookupByID(w http.ResponseWriter, r *http.Request) {
	c, found, err := s.getByID(r.Context(), r.PathValue("id"))
	s.found(w, c, found, err)
}

func (s *Server) found(w http.ResponseWriter, c charge, found bool, err error) {
	switch {
	case err != nil:
		s.log.Error("simulator: lookup", "err", err)
		writeJSON(w, http.StatusInternalServerError, encode(errorBody{Error: apiError{
			Type: "api_error", Code: "internal_error", Message: "An error occurred; retry later.",
		}}))
	case !found:
		writeJSON(w, http.StatusNotFound, encode(errorBody{Error: apiError{
			Type: "invalid_request_error", Code: "resource_missing", Message: "No such charge.",
		}}))
	default:
		writeJSON(w, http.StatusOK, encode(c.object()))
	}
}

func (s *Server) count(w http.ResponseWriter, r *http.Request) {
	key, err := parseKey("idempotency_key", r.URL.Query()["idempotency_key"])
	if err != nil {
		s.invalid(w, err)
		return
	}
	n, err := s.Count(r.Context(), key)
	if err != nil {
		s.found(w, charge{}, false, err)
		return
	}
	writeJSON(w, http.StatusOK, encode(struct {
		Count int `json:"count"`
	}{n}))
}

func (s *Server) invalid(w http.ResponseWriter, err error) {
	e := apiError{Type: "invalid_request_error", Code: "invalid_request", Message: "Invalid request."}
	var inv *invalidError
	if errors.As(err, &inv) {
		e.Param, e.Message = inv.param, inv.message
	}
	writeJSON(w, http.StatusBadRequest, encode(errorBody{Error: e}))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// shortKey identifies a key in logs without revealing it.
func shortKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
