package deploytest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// routePattern is a Go 1.22 ServeMux pattern with a method: "POST /v1/payments".
var routePattern = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (/[^\s]*)$`)

// codeRoutes returns the ServeMux patterns written as string literals in the
// non-test files of the package in dir.
func codeRoutes(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && routePattern.MatchString(v) {
					out = append(out, v)
				}
			}
			return true
		})
	}
	return sortedSlice(out)
}

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

var designRoutes = []string{"GET /v1/payments/{id}", "POST /v1/charges", "POST /v1/payments"}

func TestRoutesMatchDesign(t *testing.T) {
	if diff := cmp.Diff(designRoutes, templateRoutes(t)); diff != "" {
		t.Errorf("routes mismatch (-design +template):\n%s", diff)
	}
}

// TestRoutesMatchCode compares the API's routes with the ServeMux patterns
// of internal/httpapi: API Gateway must forward every route the handler
// serves, and nothing else.
func TestRoutesMatchCode(t *testing.T) {
	dir := filepath.Join(root(t), "internal", "httpapi")
	code := codeRoutes(t, dir)
	if len(code) == 0 {
		t.Fatal("found no routes in internal/httpapi")
	}
	if diff := cmp.Diff(code, templateRoutes(t)); diff != "" {
		t.Errorf("routes mismatch (-internal/httpapi +template.yaml):\n%s", diff)
	}
}
