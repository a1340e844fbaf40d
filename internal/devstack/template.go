package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/functionurl"
	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/samtemplate"
)

// Logical IDs in template.yaml that the devstack emulates.
const (
	apiResource      = "Api"
	apiFunction      = "ApiFunction"
	providerFunction = "ProviderFunction"
)

// api is what the devstack takes from the template's AWS::Serverless::Api.
type api struct {
	stage            string
	routes           []gateway.Route
	authorizerTTL    time.Duration // gateway.Emulator's convention: <0 disables
	binaryMediaTypes []string
	responses        map[string]gateway.GatewayResponse
}

// apiFromTemplate reads the stage, the binary media types, the gateway
// responses, the authorizer cache TTL and the api function's routes.
func apiFromTemplate(tmpl *samtemplate.Template) (api, error) {
	vars := tmpl.ParameterDefaults()
	var a api
	r, ok := tmpl.Resources()[apiResource]
	if !ok || r.Type != "AWS::Serverless::Api" {
		return api{}, fmt.Errorf("devstack: template has no AWS::Serverless::Api %s", apiResource)
	}
	stage, err := samtemplate.String(r.Properties["StageName"], vars)
	if err != nil {
		return api{}, fmt.Errorf("devstack: %s StageName: %w", apiResource, err)
	}
	a.stage = stage
	types, _ := r.Properties["BinaryMediaTypes"].([]any)
	for _, v := range types {
		t, err := samtemplate.String(v, vars)
		if err != nil {
			return api{}, fmt.Errorf("devstack: %s BinaryMediaTypes: %w", apiResource, err)
		}
		// SAM writes the slash of a media type as ~1.
		a.binaryMediaTypes = append(a.binaryMediaTypes, strings.ReplaceAll(t, "~1", "/"))
	}
	responses, err := samtemplate.GatewayResponses(r)
	if err != nil {
		return api{}, fmt.Errorf("devstack: %w", err)
	}
	for typ, gr := range responses {
		if a.responses == nil {
			a.responses = map[string]gateway.GatewayResponse{}
		}
		a.responses[typ] = gateway.GatewayResponse{StatusCode: gr.StatusCode, Headers: gr.Headers, Templates: gr.Templates}
	}

	authProps, _ := r.Properties["Auth"].(map[string]any)
	name, _ := authProps["DefaultAuthorizer"].(string)
	if name == "" {
		return api{}, fmt.Errorf("devstack: %s has no Auth.DefaultAuthorizer; the devstack always runs the authorizer", apiResource)
	}
	authorizers, _ := authProps["Authorizers"].(map[string]any)
	authorizer, _ := authorizers[name].(map[string]any)
	// SAM's default payload type is TOKEN, whose event (a bare token) the
	// emulator does not send: it sends the REQUEST authorizer's.
	if pt, err := samtemplate.String(authorizer["FunctionPayloadType"], vars); err != nil || pt != "REQUEST" {
		return api{}, fmt.Errorf("devstack: %s: FunctionPayloadType %v: the emulator runs REQUEST authorizers only", name, authorizer["FunctionPayloadType"])
	}
	identity, _ := authorizer["Identity"].(map[string]any)
	if err := checkIdentity(identity, vars); err != nil {
		return api{}, fmt.Errorf("devstack: %s: %w", name, err)
	}
	a.authorizerTTL = gateway.DefaultAuthorizerTTL
	if v, ok := identity["ReauthorizeEvery"]; ok {
		s, err := samtemplate.String(v, vars)
		secs, convErr := strconv.Atoi(s)
		if err != nil || convErr != nil || secs < 0 {
			return api{}, fmt.Errorf("devstack: %s ReauthorizeEvery %v is not a number of seconds", name, v)
		}
		a.authorizerTTL = time.Duration(secs) * time.Second
		if secs == 0 {
			a.authorizerTTL = -1 // caching off
		}
	}

	fn, ok := tmpl.Resources()[apiFunction]
	if !ok {
		return api{}, fmt.Errorf("devstack: template has no %s", apiFunction)
	}
	evs, _ := fn.Properties["Events"].(map[string]any)
	for _, raw := range evs {
		ev, _ := raw.(map[string]any)
		if ev["Type"] != "Api" {
			continue
		}
		p, _ := ev["Properties"].(map[string]any)
		path, _ := p["Path"].(string)
		method, _ := p["Method"].(string)
		if path == "" || method == "" {
			return api{}, fmt.Errorf("devstack: %s has an Api event without Path or Method", apiFunction)
		}
		if strings.EqualFold(method, "any") {
			method = "ANY"
		}
		a.routes = append(a.routes, gateway.Route{Method: strings.ToUpper(method), Resource: path})
	}
	if len(a.routes) == 0 {
		return api{}, fmt.Errorf("devstack: %s has no Api events", apiFunction)
	}
	// Literal segments before parameters, as API Gateway prefers them.
	sort.Slice(a.routes, func(i, j int) bool {
		if a.routes[i].Resource != a.routes[j].Resource {
			return a.routes[i].Resource < a.routes[j].Resource
		}
		return a.routes[i].Method < a.routes[j].Method
	})
	return a, nil
}

// functionURLAuthType returns the AuthType of the function URL of the
// template's function id (FunctionUrlConfig.AuthType): AWS_IAM or NONE.
func functionURLAuthType(tmpl *samtemplate.Template, id string) (string, error) {
	fn, ok := tmpl.Functions()[id]
	if !ok {
		return "", fmt.Errorf("devstack: template has no function %s", id)
	}
	urlConfig, ok := fn.Properties["FunctionUrlConfig"].(map[string]any)
	if !ok {
		return "", fmt.Errorf("devstack: %s has no FunctionUrlConfig", id)
	}
	authType, err := samtemplate.String(urlConfig["AuthType"], tmpl.ParameterDefaults())
	if err != nil {
		return "", fmt.Errorf("devstack: %s FunctionUrlConfig.AuthType: %w", id, err)
	}
	switch authType {
	case functionurl.AuthTypeIAM, functionurl.AuthTypeNone:
		return authType, nil
	}
	return "", fmt.Errorf("devstack: %s FunctionUrlConfig.AuthType %q: want %s or %s", id, authType, functionurl.AuthTypeIAM, functionurl.AuthTypeNone)
}

// tablesFor returns the template's tables named as cfg says (cfg.Table: the
// defaults are the names a stack called "once" gets).
func tablesFor(tmpl *samtemplate.Template, cfg config.Config) ([]samtemplate.Table, error) {
	tables, err := tmpl.Tables(config.DefaultStack)
	if err != nil {
		return nil, err
	}
	for i, t := range tables {
		in := *t.Input
		in.TableName = aws.String(cfg.Table(t.LogicalID))
		tables[i].Input = &in
	}
	return tables, nil
}

// tableIDs returns the logical IDs of the template's tables.
func tableIDs(tmpl *samtemplate.Template) []string {
	var ids []string
	for id := range tmpl.ResourcesOfType("AWS::DynamoDB::Table") {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// findTemplate returns template.yaml in the working directory or the nearest
// parent that has one.
func findTemplate() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("devstack: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "template.yaml")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("devstack: no template.yaml in the working directory or its parents; run from the repository")
		}
	}
}

// checkIdentity refuses an authorizer Identity whose sources are not the one
// the emulator caches on, the Authorization header: API Gateway keys its
// authorizer cache on the template's sources, and an emulator keyed on
// another would serve one caller's cached policy and context to another, or
// none where AWS would. An authorizer without sources is refused too:
// SAM refuses it unless ReauthorizeEvery is 0, and then API Gateway calls the
// authorizer for every request, a missing Authorization header included,
// where the emulator answers 401 itself.
func checkIdentity(identity map[string]any, vars map[string]string) error {
	for _, k := range []string{"QueryStrings", "StageVariables", "Context"} {
		if v, ok := identity[k]; ok {
			return fmt.Errorf("Identity.%s %v: the emulator's only identity source is the Authorization header", k, v)
		}
	}
	if _, ok := identity["Headers"]; !ok {
		return errors.New("no Identity.Headers: the emulator's only identity source is the Authorization header, " +
			"and SAM refuses a REQUEST authorizer without identity sources unless ReauthorizeEvery is 0")
	}
	headers, _ := identity["Headers"].([]any)
	if len(headers) != 1 {
		return fmt.Errorf("Identity.Headers %v: the emulator's only identity source is the Authorization header", identity["Headers"])
	}
	h, err := samtemplate.String(headers[0], vars)
	if err != nil || !strings.EqualFold(h, "Authorization") {
		return fmt.Errorf("Identity.Headers %v: the emulator's only identity source is the Authorization header", headers)
	}
	return nil
}
