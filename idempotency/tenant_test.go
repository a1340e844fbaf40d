package idempotency_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/problem"
)

// tenantCases are tenants Config.Tenant may return, with the status the
// middleware answers for each and the problem code when refused.
var tenantCases = []struct {
	name   string
	tenant string
	status int
	code   string
}{
	{"plain", "acme", http.StatusCreated, ""},
	{"demo pattern", "a0_b-" + strings.Repeat("z", 59), http.StatusCreated, ""},
	{"JWT subject", "auth0|5f7c8ec7c33c6c004bbafe82", http.StatusCreated, ""},
	{"e-mail and URL characters", "https://idp.example/org:42?x=y&z=~", http.StatusCreated, ""},
	{"assumed-role ARN", "arn:aws:sts::123456789012:assumed-role/" + strings.Repeat("r", 64) + "/" + strings.Repeat("s", 64), http.StatusCreated, ""},
	{"space", "Acme Corp", http.StatusCreated, ""},
	{"unicode", "Société Générale – 東京", http.StatusCreated, ""},
	{"emoji", "org 🚀", http.StatusCreated, ""},
	{"U+FFFD written out", "acme\ufffd", http.StatusCreated, ""},
	{"longest", strings.Repeat("~", idempotency.MaxTenantLength), http.StatusCreated, ""},
	{"longest, multi-byte", strings.Repeat("é", idempotency.MaxTenantLength/2), http.StatusCreated, ""},
	{"hash", "acme#x", http.StatusForbidden, "tenant_invalid"},
	{"hash alone", "#", http.StatusForbidden, "tenant_invalid"},
	{"NUL", "acme\x00", http.StatusForbidden, "tenant_invalid"},
	{"newline", "ac\nme", http.StatusForbidden, "tenant_invalid"},
	{"tab", "ac\tme", http.StatusForbidden, "tenant_invalid"},
	{"ESC", "acme\x1b[31m", http.StatusForbidden, "tenant_invalid"},
	{"DEL", "acme\x7f", http.StatusForbidden, "tenant_invalid"},
	{"C1 NEL", "acme\u0085", http.StatusForbidden, "tenant_invalid"},
	{"C1 CSI", "acme\u009b", http.StatusForbidden, "tenant_invalid"},
	{"right-to-left override", "acme\u202e", http.StatusForbidden, "tenant_invalid"},
	{"right-to-left mark", "ac\u200fme", http.StatusForbidden, "tenant_invalid"},
	{"arabic letter mark", "\u061cacme", http.StatusForbidden, "tenant_invalid"},
	{"first strong isolate", "acme\u2068x", http.StatusForbidden, "tenant_invalid"},
	{"pop directional isolate", "acme\u2069", http.StatusForbidden, "tenant_invalid"},
	{"left-to-right embedding", "\u202aacme", http.StatusForbidden, "tenant_invalid"},
	{"zero-width joiner (emoji sequence)", "org 👩\u200d💻", http.StatusCreated, ""},
	{"arabic", "شركة", http.StatusCreated, ""},
	{"invalid UTF-8", "acme\xff", http.StatusForbidden, "tenant_invalid"},
	{"truncated UTF-8", "acm\xc3", http.StatusForbidden, "tenant_invalid"},
	{"surrogate", "acme\xed\xa0\x80", http.StatusForbidden, "tenant_invalid"},
	{"one byte too long", strings.Repeat("a", idempotency.MaxTenantLength+1), http.StatusForbidden, "tenant_invalid"},
	{"one byte too long, multi-byte", "a" + strings.Repeat("é", idempotency.MaxTenantLength/2), http.StatusForbidden, "tenant_invalid"},
	{"3000 bytes", strings.Repeat("a", 3000), http.StatusForbidden, "tenant_invalid"},
	{"empty", "", http.StatusUnauthorized, "unauthorized"},
}

func TestValidateTenant(t *testing.T) {
	for _, tt := range tenantCases {
		t.Run(tt.name, func(t *testing.T) {
			err := idempotency.ValidateTenant(tt.tenant)
			if valid := tt.status == http.StatusCreated; (err == nil) != valid {
				t.Fatalf("ValidateTenant(%.40q) = %v, want valid %v", tt.tenant, err, valid)
			}
			if err == nil {
				key := idempotency.NewKey(tt.tenant, "k")
				if got, perr := idempotency.ParseID(key.ID()); perr != nil || got != key {
					t.Errorf("ParseID(%q) = %v, %v, want %v", key.ID(), got, perr, key)
				}
				return
			}
			var te *idempotency.TenantError
			if !errors.Is(err, idempotency.ErrTenantInvalid) || !errors.As(err, &te) {
				t.Fatalf("ValidateTenant(%.40q) = %T %v, want a *TenantError matching ErrTenantInvalid", tt.tenant, err, err)
			}
			msg := err.Error()
			if len(msg) > 200 || strings.ContainsAny(msg, "\x00\n\x7f") || te.Len != len(tt.tenant) {
				t.Errorf("ValidateTenant(%.40q).Error() = %q (Len %d), want a short line, no control characters, Len %d", tt.tenant, msg, te.Len, len(tt.tenant))
			}
			if leaks(msg, tt.tenant) {
				t.Errorf("ValidateTenant(%.40q).Error() = %q, holds the tenant's bytes", tt.tenant, msg)
			}
		})
	}
}

// TestTenantErrorProblem: the answer is 403 tenant_invalid, stating the
// rule and never the tenant.
func TestTenantErrorProblem(t *testing.T) {
	err := idempotency.ValidateTenant("acme#secret")
	if !strings.Contains(idempotency.ErrTenantInvalid.Problem().Detail, strconv.Itoa(idempotency.MaxTenantLength)+" bytes") {
		t.Errorf("ErrTenantInvalid's detail %q does not state MaxTenantLength (%d)", idempotency.ErrTenantInvalid.Problem().Detail, idempotency.MaxTenantLength)
	}
	w := httptest.NewRecorder()
	problem.Write(w, httptest.NewRequest("POST", "/", nil), err)
	var p struct{ Code, Detail string }
	if jerr := json.Unmarshal(w.Body.Bytes(), &p); jerr != nil {
		t.Fatalf("problem %s: %v", w.Body, jerr)
	}
	if w.Code != http.StatusForbidden || p.Code != "tenant_invalid" || strings.Contains(w.Body.String(), "secret") ||
		!strings.Contains(p.Detail, strconv.Itoa(idempotency.MaxTenantLength)) {
		t.Errorf("problem = %d %s, want 403 tenant_invalid stating the rule (%d characters), not the tenant", w.Code, w.Body, idempotency.MaxTenantLength)
	}
}

// TestInvalidTenantRefused: a tenant outside the rule, from the deployment's
// own tenant function, is refused with 403 tenant_invalid before the store
// is touched (no record, no effect, no store call), on every retry, and the
// operator gets one error line that holds none of the tenant.
func TestInvalidTenantRefused(t *testing.T) {
	for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
		for _, tt := range tenantCases {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				store := memory.New()
				var logs bytes.Buffer
				mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return tt.tenant, true },
					Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				runs := 0
				h := wrap(mw, mode, "POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					call, ok := idempotency.Begin(w, r)
					if !ok {
						return
					}
					runs++
					call.AddEffect(memory.Insert("notes", "n1", "a note"))
					w.WriteHeader(http.StatusCreated)
				}))
				for attempt := range 2 {
					var obs idempotency.Observation
					r := httptest.NewRequest("POST", "/v1/notes", strings.NewReader(`{}`))
					if attempt == 1 {
						r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
					}
					r.Header.Set(idempotency.Header, "k1")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if tt.status == http.StatusCreated {
						if w.Code != http.StatusCreated {
							t.Fatalf("attempt %d = %d %s, want 201 (or its replay)", attempt, w.Code, w.Body)
						}
						continue
					}
					if w.Code != tt.status || !strings.Contains(w.Body.String(), `"code":"`+tt.code+`"`) || w.Header().Get("Retry-After") != "" {
						t.Errorf("attempt %d = %d %s (Retry-After %q), want %d %s, no Retry-After", attempt, w.Code, w.Body, w.Header().Get("Retry-After"), tt.status, tt.code)
					}
					if attempt == 1 && (obs.StoreCalls != 0 || obs.Tenant != "" || obs.Key != "") {
						t.Errorf("observation: %d store calls, tenant %.40q, key %q; want none", obs.StoreCalls, obs.Tenant, obs.Key)
					}
					if tt.code == "tenant_invalid" && attempt == 1 && (obs.Outcome != "invalid_tenant" || !strings.Contains(obs.Err, "tenant is invalid")) {
						t.Errorf("observation: outcome %q, err %q; want invalid_tenant saying why", obs.Outcome, obs.Err)
					}
				}
				if tt.status == http.StatusCreated {
					// (An Atomic retry runs the handler, whose commit then finds the record.)
					if rec, err := store.Get(t.Context(), idempotency.NewKey(tt.tenant, "k1")); err != nil || rec.Status != idempotency.StatusCompleted {
						t.Errorf("valid tenant: record %s, err %v; want COMPLETED", rec.Status, err)
					}
					return
				}
				if runs != 0 {
					t.Errorf("handler ran %d times, want 0", runs)
				}
				if _, err := store.Get(t.Context(), idempotency.NewKey(tt.tenant, "k1")); !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("record: err %v, want ErrNotFound", err)
				}
				if items := store.Items("notes"); len(items) != 0 {
					t.Errorf("effects written: %v", items)
				}
				checkTenantLog(t, logs.String(), tt.tenant, tt.code == "tenant_invalid")
			})
		}
	}
}

// checkTenantLog checks the operator's log of one refused request (the
// first attempt, without an Observation): one error line for an invalid
// tenant, bounded, holding none of the tenant; nothing otherwise.
func checkTenantLog(t *testing.T, logs, tenant string, want bool) {
	t.Helper()
	if !want {
		if logs != "" {
			t.Errorf("logs = %s, want none", logs)
		}
		return
	}
	lines := strings.Split(strings.TrimSuffix(logs, "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("logs = %q, want one line", logs)
	}
	var line struct{ Level, Outcome, Error string }
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("log line %s: %v", lines[0], err)
	}
	if line.Level != "ERROR" || line.Outcome != "invalid_tenant" || len(lines[0]) > 600 {
		t.Errorf("log line = %s, want one ERROR invalid_tenant line of at most 600 bytes", lines[0])
	}
	if leaks(logs, tenant) {
		t.Errorf("log line %s holds the %d-byte tenant", lines[0], len(tenant))
	}
}

// leaks reports whether text holds tenant, as it is, JSON-escaped or
// Go-quoted, or (for a long one) its first 16 bytes. A tenant of fewer than
// 4 bytes ("#") is not looked for: the reason names the byte at fault.
func leaks(text, tenant string) bool {
	if len(tenant) < 4 {
		return false
	}
	j, _ := json.Marshal(tenant)
	forms := []string{tenant, string(j[1 : len(j)-1]), strconv.Quote(tenant)[1 : len(strconv.Quote(tenant))-1]}
	if len(tenant) > 16 {
		forms = append(forms, tenant[:16])
	}
	for _, f := range forms {
		if f != "" && strings.Contains(text, f) {
			return true
		}
	}
	return false
}
