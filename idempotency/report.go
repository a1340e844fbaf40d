package idempotency

import (
	"context"
	"log/slog"
	"net/http"
)

// report logs, to the Middleware's logger, the request's outcome when an
// operator must see it (see Config.Logger); status is the one answered (0:
// none written, which is 200).
func (m *Middleware) report(ctx context.Context, obs *Observation, status int, key Key) {
	if status == 0 {
		status = http.StatusOK
	}
	level, msg, ok := operatorLevel(obs, status)
	if !ok {
		return
	}
	attrs := []slog.Attr{
		slog.String("route", obs.Route),
		slog.String("outcome", obs.Outcome),
		slog.Int("status", status),
	}
	if key.Hash != "" {
		attrs = append(attrs, slog.String("record_id", key.ID()))
	}
	if obs.Err != "" {
		attrs = append(attrs, slog.String("error", obs.Err))
	}
	m.logger().LogAttrs(ctx, level, msg, attrs...)
}

// operatorLevel says whether, at which level and with which message a
// request's outcome is logged for an operator.
func operatorLevel(obs *Observation, status int) (slog.Level, string, bool) {
	switch {
	case obs.Outcome == OutcomeInvalidTenant:
		return slog.LevelError, "idempotency: Config.Tenant returned an invalid tenant: the deployment's tenant function needs fixing", true
	case obs.Outcome == OutcomeEffectsDropped:
		return slog.LevelError, "idempotency: an answer stored without its effects: the state it left needs an operator", true
	case obs.Outcome == OutcomeStoreError && status < 500:
		// The store refused the client's request (413: a body over what a
		// record keeps): the client's mistake, answered as such.
		return 0, "", false
	case obs.Outcome == OutcomeStoreError && status == http.StatusServiceUnavailable:
		return slog.LevelWarn, "idempotency: the store is unavailable", true
	case obs.Outcome == OutcomeStoreError:
		return slog.LevelError, "idempotency: a store error", true
	case obs.Outcome == OutcomeInProgress && obs.Err != "":
		return slog.LevelWarn, "idempotency: a write handing an abandoned record on failed; its retries get 409 until one succeeds", true
	case obs.Outcome == OutcomeRejected && status >= 500 && obs.Err != "":
		return slog.LevelError, "idempotency: the handler broke the contract", true
	case (obs.Outcome == OutcomeReleased || obs.Outcome == OutcomeUnknown) && obs.Err != "":
		return slog.LevelWarn, "idempotency: a write after the handler failed; the lease recovers the key", true
	}
	return 0, "", false
}

// statusWriter notes the status a response is sent with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 && status >= 200 {
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

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
