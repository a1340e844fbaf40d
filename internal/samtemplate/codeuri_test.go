package samtemplate

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSetCodeURIs(t *testing.T) {
	data, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	uris := map[string]string{}
	for id := range orig.Functions() {
		uris[id] = "s3://bucket/" + id + ".zip"
	}
	out, err := SetCodeURIs(data, uris)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(SetCodeURIs()) error: %v\n%s", err, out)
	}
	// Only the CodeUris differ, short-form tags included.
	for id, uri := range uris {
		props := orig.Doc["Resources"].(map[string]any)[id].(map[string]any)["Properties"].(map[string]any)
		props["CodeUri"] = uri
	}
	if diff := cmp.Diff(orig.Doc, got.Doc); diff != "" {
		t.Errorf("SetCodeURIs changed more than CodeUri (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(out), "!GetAtt") {
		t.Errorf("SetCodeURIs dropped the short-form tags:\n%s", out)
	}

	if _, err := SetCodeURIs(data, map[string]string{"IdempotencyTable": "x"}); err == nil {
		t.Errorf("SetCodeURIs(a table) error = nil, want one")
	}
	if _, err := SetCodeURIs([]byte("- a\n"), uris); err == nil {
		t.Errorf("SetCodeURIs(a list) error = nil, want one")
	}
}
