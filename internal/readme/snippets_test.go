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
// them; and holds its DynamoDB Local create-table commands to the
// idempotency table's schema: the hash key pk, a string, and TTL on
// expires_at, the names the dynamo store writes.
func TestUseOnceSnippets(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)

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
	goCmd(t, dir, "get", "github.com/oncehq/once")
	goCmd(t, dir, "vet", "./refunds", "./orders")

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
