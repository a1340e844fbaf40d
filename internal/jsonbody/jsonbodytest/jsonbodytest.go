package jsonbodytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
)

// CheckRefusal fails t unless err, the error of decoding body, is a
// *problem.FieldError answered as 400 invalid_request, whose field is empty
// only for a body that is not a well-formed JSON object or has a member
// with an empty name, and otherwise is
// one of fields (the endpoint's parameters), a member of body (an unknown
// parameter), or a path under one of them ("metadata.order", "x[0]") when
// the body is a well-formed object.
func CheckRefusal(t testing.TB, body []byte, err error, fields []string) {
	t.Helper()
	var ferr *problem.FieldError
	if !errors.As(err, &ferr) {
		t.Fatalf("Decode(%q) error = %v (%T), want a *problem.FieldError", body, err, err)
	}
	d := problem.For(err)
	if d.Status != http.StatusBadRequest || d.Code != "invalid_request" || !d.HasField || d.Field != ferr.Field || d.Detail == "" {
		t.Fatalf("Decode(%q) error %v answers %+v, want 400 invalid_request naming %q", body, err, d, ferr.Field)
	}
	var members map[string]json.RawMessage
	object := utf8.Valid(body) && json.Valid(body) && json.Unmarshal(body, &members) == nil && members != nil
	if ferr.Field == "" {
		// A \u escape may hold a lone surrogate, which the body as a whole
		// is refused for.
		if _, empty := members[""]; object && !empty && !bytes.Contains(body, []byte(`\u`)) {
			t.Fatalf("Decode(%q) error %v names no field, but the body is a well-formed JSON object", body, err)
		}
		return
	}
	names := append([]string(nil), fields...)
	for name := range members {
		names = append(names, name)
	}
	if !object {
		// A duplicate member or deep nesting found before the body's
		// syntax error, or a path in an array: [0].a.
		return
	}
	for _, name := range names {
		if ferr.Field == name || strings.HasPrefix(ferr.Field, name+".") || strings.HasPrefix(ferr.Field, name+"[") {
			return
		}
	}
	t.Fatalf("Decode(%q) error %v names %q: neither a parameter (%v) nor a member of the body", body, err, ferr.Field, fields)
}

// CheckRoundTrips fails t unless req, what decode accepted body as, is what
// decode makes of body's canonical form (idempotency.Canonical: an External
// record stores it, and a reconciler rebuilds the answer from it) and of
// req's own JSON encoding; and body, accepted, can be fingerprinted.
func CheckRoundTrips[T any](t testing.TB, body []byte, req T, decode func([]byte) (T, error)) {
	t.Helper()
	canonical, err := idempotency.Canonical(body)
	if err != nil {
		t.Fatalf("Decode(%q) accepted a body the idempotency fingerprint refuses: %v", body, err)
	}
	fromCanonical, err := decode(canonical)
	if err != nil {
		t.Fatalf("Decode(%s) of the canonical form of %q error = %v", canonical, body, err)
	}
	if diff := cmp.Diff(req, fromCanonical); diff != "" {
		t.Fatalf("Decode of %q and of its canonical form %s mismatch (-body +canonical):\n%s", body, canonical, diff)
	}
	out, err := json.Marshal(req)
	if err != nil {
		t.Fatalf("json.Marshal(%+v) error = %v", req, err)
	}
	again, err := decode(out)
	if err != nil {
		t.Fatalf("Decode(%s) of a re-encoded valid request (from %q) error = %v", out, body, err)
	}
	if diff := cmp.Diff(req, again); diff != "" {
		t.Fatalf("round trip of %q through %s mismatch (-first +second):\n%s", body, out, diff)
	}
}
