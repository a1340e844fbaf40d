package samtemplate

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
)

// GatewayResponseTypes are the response types a REST API's gateway response
// can have (the API Gateway API reference, GatewayResponse responseType).
var GatewayResponseTypes = []string{
	"DEFAULT_4XX", "DEFAULT_5XX", "RESOURCE_NOT_FOUND", "UNAUTHORIZED", "INVALID_API_KEY",
	"ACCESS_DENIED", "AUTHORIZER_FAILURE", "AUTHORIZER_CONFIGURATION_ERROR", "INVALID_SIGNATURE",
	"EXPIRED_TOKEN", "MISSING_AUTHENTICATION_TOKEN", "INTEGRATION_FAILURE", "INTEGRATION_TIMEOUT",
	"API_CONFIGURATION_ERROR", "UNSUPPORTED_MEDIA_TYPE", "BAD_REQUEST_PARAMETERS", "BAD_REQUEST_BODY",
	"REQUEST_TOO_LARGE", "THROTTLED", "QUOTA_EXCEEDED", "WAF_FILTERED",
}

// GatewayResponse is one entry of an AWS::Serverless::Api's GatewayResponses.
type GatewayResponse struct {
	// StatusCode is the status, 0 when the entry sets none.
	StatusCode int
	// Headers are ResponseParameters.Headers: header name to mapping
	// expression ('static' or method.request.header.X). SAM writes each as
	// gatewayresponse.header.<name>.
	Headers map[string]string
	// Templates are ResponseTemplates: content type to body template.
	Templates map[string]string
}

var statusPattern = regexp.MustCompile(`^[1-5][0-9][0-9]$`)

// GatewayResponses returns the GatewayResponses property of the
// AWS::Serverless::Api r, keyed by response type, and fails on what SAM's
// translator or API Gateway would refuse: an unknown response type, a
// property other than StatusCode, ResponseParameters and ResponseTemplates
// (samtranslator's GatewayResponseProperties), a ResponseParameters key other
// than Headers, Paths and QueryStrings, a StatusCode not of the pattern
// [1-5]\d\d, or a value that is not a plain string (SAM supports no
// intrinsic functions there). Paths and QueryStrings are checked but not
// returned: the API sets none.
func GatewayResponses(r Resource) (map[string]GatewayResponse, error) {
	raw, ok := r.Properties["GatewayResponses"]
	if !ok {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("samtemplate: %s GatewayResponses is not a mapping", r.LogicalID)
	}
	out := make(map[string]GatewayResponse, len(m))
	for _, typ := range sortedKeys(m) {
		if !slices.Contains(GatewayResponseTypes, typ) {
			return nil, fmt.Errorf("samtemplate: %s GatewayResponses: unknown response type %q", r.LogicalID, typ)
		}
		gr, err := gatewayResponse(m[typ])
		if err != nil {
			return nil, fmt.Errorf("samtemplate: %s GatewayResponses.%s: %w", r.LogicalID, typ, err)
		}
		out[typ] = gr
	}
	return out, nil
}

func gatewayResponse(raw any) (GatewayResponse, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return GatewayResponse{}, fmt.Errorf("not a mapping")
	}
	var gr GatewayResponse
	for _, k := range sortedKeys(m) {
		switch k {
		case "StatusCode":
			s := fmt.Sprint(m[k])
			if _, isMap := m[k].(map[string]any); isMap || !statusPattern.MatchString(s) {
				return GatewayResponse{}, fmt.Errorf("StatusCode %v is not a status code", m[k])
			}
			gr.StatusCode, _ = strconv.Atoi(s)
		case "ResponseTemplates":
			t, err := stringMap(m[k])
			if err != nil {
				return GatewayResponse{}, fmt.Errorf("ResponseTemplates: %w", err)
			}
			gr.Templates = t
		case "ResponseParameters":
			params, ok := m[k].(map[string]any)
			if !ok {
				return GatewayResponse{}, fmt.Errorf("ResponseParameters is not a mapping")
			}
			for _, p := range sortedKeys(params) {
				v, err := stringMap(params[p])
				if err != nil {
					return GatewayResponse{}, fmt.Errorf("ResponseParameters.%s: %w", p, err)
				}
				switch p {
				case "Headers":
					gr.Headers = v
				case "Paths", "QueryStrings":
				default:
					return GatewayResponse{}, fmt.Errorf("ResponseParameters: unknown key %q (Headers, Paths, QueryStrings)", p)
				}
			}
		default:
			return GatewayResponse{}, fmt.Errorf("unknown property %q (StatusCode, ResponseParameters, ResponseTemplates)", k)
		}
	}
	return gr, nil
}

func stringMap(raw any) (map[string]string, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a mapping")
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: %v is not a string", k, v)
		}
		out[k] = s
	}
	return out, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
