package deploytest

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/oncehq/once/internal/samtemplate"
)

// emulation lists the module's packages (paths relative to the module) that
// no function runs: local emulation (API Gateway, function URLs' IAM
// authorization, event source mappings, SQS, DynamoDB Local, Lambda
// execution environments, the Streams client of the pollers), test and bench
// support, the template reader and the operator's
// tool. A path ending in "/..." also matches the packages under it.
var emulation = []string{
	"cmd/...",
	"internal/gateway/...",
	"internal/functionurl/...",
	"internal/devstack/...",
	"internal/stream/...",
	"internal/sqslocal/...",
	"internal/sqsmapping/...",
	"internal/ddblocal/...",
	"internal/lambdaenv/...",
	"internal/dynamoclient/streamsclient/...",
	"internal/modelcheck/...",
	"internal/bench/...",
	"internal/e2e/...",
	"internal/readme/...",
	"internal/samtemplate/...",
	"internal/operator/...",
}

// testSupport lists packages outside the module that only tests use. (In the
// module, every package named *test is test support.)
var testSupport = []string{
	"testing/...",
	"net/http/httptest",
	"github.com/google/go-cmp/...",
	"github.com/anishathalye/porcupine/...",
}

// streamsClient is the DynamoDB Streams API client: Lambda's event source
// mappings read the streams for the functions, and only the local pollers
// call the API. (Its types package is linked by the SDK's attributevalue.)
const streamsClient = "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

// httpAdapters serve HTTP on Lambda: only a function that answers HTTP
// requests (an Api event, a function URL) links them. The first is relative
// to the module.
var httpAdapters = []string{
	"idempotency/apigw/...",
	"github.com/awslabs/aws-lambda-go-api-proxy/...",
}

// simulators are the fakes of external providers: only the function that
// deploys one in a demo stack links it, by folder.
var simulators = map[string]string{
	"internal/provider/simulator": "provider",
}

// goPkgGraph is a package of `go list -deps -json`.
type goPkgGraph struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// linkGraph returns the packages of the dependency graph of patterns, as
// deployed (GOOS=linux, -tags lambda.norpc), by import path.
func linkGraph(t *testing.T, patterns ...string) map[string]goPkgGraph {
	t.Helper()
	args := append([]string{"list", "-deps", "-tags", "lambda.norpc", "-json=ImportPath,Imports,Deps"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v\n%s", patterns, err, stderr.String())
	}
	graph := map[string]goPkgGraph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPkgGraph
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		graph[p.ImportPath] = p
	}
	return graph
}

// inModule returns paths, relative to module, as import paths.
func inModule(module string, paths ...string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = module + "/" + p
	}
	return out
}

// matches reports whether the import path pkg is one of paths ("x/..." also
// matches x's subpackages).
func matches(pkg string, paths []string) bool {
	for _, p := range paths {
		if tree, ok := strings.CutSuffix(p, "/..."); ok {
			if pkg == tree || strings.HasPrefix(pkg, tree+"/") {
				return true
			}
		} else if pkg == p {
			return true
		}
	}
	return false
}

// servesHTTP reports whether fn answers HTTP requests: an API Gateway event
// or a function URL.
func servesHTTP(fn samtemplate.Function) bool {
	if _, ok := fn.Properties["FunctionUrlConfig"]; ok {
		return true
	}
	return servesAPI(fn)
}

// servesAPI reports whether API Gateway routes requests to fn.
func servesAPI(fn samtemplate.Function) bool {
	for _, e := range fn.Events() {
		if e.Type == "Api" || e.Type == "HttpApi" {
			return true
		}
	}
	return false
}

// apiAuthorizers returns the logical IDs of the functions that the
// template's APIs name as their authorizers.
func apiAuthorizers(tm *samtemplate.Template) map[string]bool {
	out := map[string]bool{}
	for _, typ := range []string{"AWS::Serverless::Api", "AWS::Serverless::HttpApi"} {
		for _, api := range tm.ResourcesOfType(typ) {
			for _, r := range samtemplate.Refs(mapOf(api.Properties["Auth"])["Authorizers"]) {
				out[r.Name] = true
			}
		}
	}
	return out
}

// TestFunctionsLinkOnlyWhatTheyRun checks, with `go list -deps` as the
// functions are deployed, that each functions/<name> links only what it
// runs:
//
//   - no function, and not the public root package that users' own functions
//     link, links local emulation, test or bench support (the lists above,
//     and any module package named *test) or the DynamoDB Streams API
//     client;
//   - a simulator links only into the function that deploys it;
//   - the API's packages (internal/httpapi, crash injection, and every
//     module package that imports internal/httpapi: the routes) link only
//     into a function API Gateway routes requests to, and the HTTP adapters
//     only into a function that answers HTTP (the reconciler runs the
//     External routes' resolvers, which their domain packages declare
//     without the HTTP layer);
//   - the authorizer's package links only into the function the template's
//     API names as its authorizer.
func TestFunctionsLinkOnlyWhatTheyRun(t *testing.T) {
	folders := functionFolders(t)
	if len(folders) == 0 {
		t.Fatal("functions/ has no function")
	}
	module := modulePath(t)
	patterns := []string{"."}
	for _, f := range folders {
		patterns = append(patterns, "./functions/"+f)
	}
	graph := linkGraph(t, patterns...)

	// The API's packages: the router, crash injection and whatever serves
	// routes on the router.
	api := inModule(module, "internal/httpapi", "internal/fault")
	for path, p := range graph {
		if strings.HasPrefix(path, module+"/") && slices.Contains(p.Imports, module+"/internal/httpapi") {
			api = append(api, path)
		}
	}
	if len(api) == 2 {
		t.Fatalf("no package of %v imports internal/httpapi: the API's packages are not found", patterns)
	}

	local := inModule(module, emulation...)
	adapters := append(inModule(module, httpAdapters[0]), httpAdapters[1:]...)
	tm := template(t)
	fns := tm.Functions()
	authorizers := apiAuthorizers(tm)
	if len(authorizers) == 0 {
		t.Fatal("template.yaml: no API names an authorizer function")
	}

	// check reports the packages deps of subject that a rule forbids.
	check := func(subject string, deps []string, forbid func(pkg string) string) {
		t.Helper()
		for _, pkg := range deps {
			if why := forbid(pkg); why != "" {
				t.Errorf("%s links %s: %s", subject, pkg, why)
			}
		}
	}
	everywhere := func(pkg string) string {
		switch {
		case matches(pkg, local), strings.HasPrefix(pkg, module+"/") && strings.HasSuffix(pkg, "test"), matches(pkg, testSupport):
			return "local emulation or test support, never run by a function"
		case pkg == streamsClient:
			return "the Streams API client: Lambda's event source mappings read the streams"
		}
		return ""
	}

	rootPkg, ok := graph[module]
	if !ok {
		t.Fatalf("go list: no package %s", module)
	}
	check("the root package (once.go)", append(rootPkg.Deps, module), everywhere)

	for _, folder := range folders {
		id := samtemplate.FunctionLogicalID(folder)
		fn, ok := fns[id]
		if !ok {
			continue // TestFunctionsMatchFolders reports it
		}
		path := module + "/functions/" + folder
		p, ok := graph[path]
		if !ok {
			t.Errorf("go list: no package %s", path)
			continue
		}
		check("functions/"+folder, p.Deps, func(pkg string) string {
			if why := everywhere(pkg); why != "" {
				return why
			}
			for sim, owner := range simulators {
				if matches(pkg, inModule(module, sim+"/...")) && folder != owner {
					return "a simulator, deployed by functions/" + owner + " only"
				}
			}
			switch {
			case pkg == module+"/internal/auth" && !authorizers[id]:
				return "the authorizer's package, but no API names " + id + " as its authorizer"
			case matches(pkg, api) && !servesAPI(fn):
				return "the API's HTTP layer, but " + id + " has no Api event"
			case matches(pkg, adapters) && !servesHTTP(fn):
				return "an HTTP adapter, but " + id + " answers no HTTP request"
			}
			return ""
		})
	}
}

// TestAuditorLinksNoRecovery: the auditor only reads the idempotency table;
// it does not link the recovery package (the checker's and sweeper's
// code), whose one constant it needs internal/abandoned copies.
func TestAuditorLinksNoRecovery(t *testing.T) {
	module := modulePath(t)
	graph := linkGraph(t, "./functions/auditor")
	p, ok := graph[module+"/functions/auditor"]
	if !ok {
		t.Fatal("go list: no package functions/auditor")
	}
	if slices.Contains(p.Deps, module+"/idempotency/recovery") {
		t.Errorf("functions/auditor links %s/idempotency/recovery", module)
	}
}
