package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency/dynamo"
)

// TestUseOnceSnippets builds the README's External (refunds.go) and
// multi-step (orders.go) snippets exactly as written, each a package of a
// fresh module that requires nothing but github.com/oncehq/once, and vets
// them; runs the refunds snippet's handler as its text above classifies
// the provider's answers (refundsTest); and holds its DynamoDB Local create-table commands to the
// idempotency table's schema: the hash key pk, a string, and TTL on
// expires_at, the names the dynamo store writes.
func TestUseOnceSnippets(t *testing.T) {
	root, readme := readRepoREADME(t)

	dir := t.TempDir()
	gomod := "module example.com/shop\n\ngo 1.26\n\nreplace github.com/oncehq/once => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"refunds", "orders"} {
		src := block(t, readme, "readme:"+pkg+".go")
		if !strings.HasPrefix(src, "package "+pkg+"\n") {
			t.Errorf("the README's %s.go snippet does not start with package %s", pkg, pkg)
		}
		if err := os.MkdirAll(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pkg, pkg+".go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "refunds", "refunds_test.go"), []byte(refundsTest), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, dir, "get", "github.com/oncehq/once")
	goCmd(t, dir, "vet", "./refunds", "./orders")
	goCmd(t, dir, "test", "-count=1", "./refunds")

	sh := block(t, readme, "readme:create-table.sh")
	for _, want := range []string{
		"--attribute-definitions AttributeName=" + dynamo.AttrPK + ",AttributeType=S ",
		"--key-schema AttributeName=" + dynamo.AttrPK + ",KeyType=HASH",
		"--time-to-live-specification Enabled=true,AttributeName=" + dynamo.AttrExpiresAt,
		"StreamViewType=NEW_AND_OLD_IMAGES",
	} {
		if !strings.Contains(sh, want) {
			t.Errorf("the README's create-table commands lack %q:\n%s", want, sh)
		}
	}
}

// refundsTest is a test of the README's refunds.go snippet, run in its
// package: a body that is not JSON is reported as such, not as an amount;
// a definite decline (ErrDeclined) is answered 402, stored and replayed
// (one provider call for two attempts), never UNKNOWN.
const refundsTest = `package refunds

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

type provider struct {
	calls int
	err   error
}

func (p *provider) Refund(context.Context, string, int64) (string, error) {
	p.calls++
	return "re_1", p.err
}

func (p *provider) Lookup(context.Context, string) (string, bool, error) { return "", false, nil }

func TestClassification(t *testing.T) {
	store := memory.New()
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	p := &provider{err: ErrDeclined}
	h := mw.External("POST /v1/refunds", Handler(p), Resolver(p))
	post := func(key, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/v1/refunds", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := post("k0", "{\"amount\":\"ten\"}"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "body") || strings.Contains(w.Body.String(), "positive") {
		t.Errorf("a body that is not a refund = %d %s, want 400 about the body", w.Code, w.Body)
	}
	for attempt := range 2 {
		if w := post("k1", "{\"amount\":100}"); w.Code != http.StatusPaymentRequired || !strings.Contains(w.Body.String(), "refund_declined") {
			t.Errorf("attempt %d of a declined refund = %d %s, want 402 refund_declined", attempt, w.Code, w.Body)
		}
	}
	if p.calls != 1 {
		t.Errorf("the provider was called %d times, want 1 (the decline stored and replayed)", p.calls)
	}
	rec, err := store.Get(t.Context(), idempotency.NewKey("acme", "k1"))
	if err != nil || rec.Status != idempotency.StatusCompleted {
		t.Errorf("record = %s, %v; want COMPLETED (not UNKNOWN)", rec.Status, err)
	}
}
`
