package deploytest

import (
	"strings"
	"testing"

	"github.com/oncehq/once/internal/api"

	"github.com/google/go-cmp/cmp"
)

// templateRoutes returns ApiFunction's Api events as "METHOD /path".
func templateRoutes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, ev := range template(t).Functions()["ApiFunction"].Events() {
		if ev.Type != "Api" {
			t.Errorf("ApiFunction event %s has type %s, want Api", ev.Name, ev.Type)
			continue
		}
		p := ev.Properties
		if diff := cmp.Diff(map[string]any{"Ref": "Api"}, p["RestApiId"]); diff != "" {
			t.Errorf("ApiFunction event %s RestApiId mismatch (-want +got):\n%s", ev.Name, diff)
		}
		if _, ok := p["Auth"]; ok {
			t.Errorf("ApiFunction event %s overrides Auth; every route goes through the DefaultAuthorizer", ev.Name)
		}
		method, _ := p["Method"].(string)
		path, _ := p["Path"].(string)
		out = append(out, strings.ToUpper(method)+" "+path)
	}
	for id, fn := range template(t).Functions() {
		for _, ev := range fn.Events() {
			if id != "ApiFunction" && ev.Type == "Api" {
				t.Errorf("%s has an Api event; only ApiFunction serves the API", id)
			}
		}
	}
	return sortedSlice(out)
}

// TestRoutesMatchCode compares the API's routes with the routes the api
// function serves (api.Patterns): API Gateway must forward every route the
// handler serves, and nothing else.
func TestRoutesMatchCode(t *testing.T) {
	code := sortedSlice(api.Patterns())
	if len(code) == 0 {
		t.Fatal("api.Patterns() lists no routes")
	}
	if diff := cmp.Diff(code, templateRoutes(t)); diff != "" {
		t.Errorf("routes mismatch (-api.Patterns +template.yaml):\n%s", diff)
	}
}
