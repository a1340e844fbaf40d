package devstack

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/samtemplate"
)

// minimalAPI is the least template the devstack takes: its Api's
// BinaryMediaTypes and its authorizer's Identity are the verbs.
const minimalAPI = `
Resources:
  Api:
    Type: AWS::Serverless::Api
    Properties:
      StageName: prod
      BinaryMediaTypes: %s
      Auth:
        DefaultAuthorizer: A
        Authorizers:
          A:
            FunctionPayloadType: %s
            Identity: %s
  ApiFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Create:
          Type: Api
          Properties: {Path: /v1/payments, Method: post}
`

// TestAPIBinaryMediaTypes checks that the emulator gets the Api's
// BinaryMediaTypes as API Gateway does, SAM's ~1 read as a slash: none from
// template.yaml, so that every body reaches the api function as text.
func TestAPIBinaryMediaTypes(t *testing.T) {
	minimal := fmt.Sprintf(minimalAPI, `[image~1png, "*~1*"]`, "REQUEST", "{Headers: [Authorization]}")
	repo, err := samtemplate.Load("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	withTypes, err := samtemplate.Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tmpl *samtemplate.Template
		want []string
	}{
		{"template.yaml", repo, nil},
		{"binary media types", withTypes, []string{"image/png", "*/*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := apiFromTemplate(tt.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, a.binaryMediaTypes); diff != "" {
				t.Errorf("binaryMediaTypes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAuthorizerIdentitySources checks that the devstack runs the authorizer
// only with the identity sources the emulator caches on, as API Gateway caches
// on the template's: the Authorization header alone. A template naming other
// sources (another header, one more, a query string) is refused, not
// emulated with a cache keyed on something else, and so is one with none,
// which SAM refuses too unless ReauthorizeEvery is 0 (aws-sam-translator
// 1.110.0: "must specify Identity with at least one of Headers, ...").
func TestAuthorizerIdentitySources(t *testing.T) {
	tests := []struct {
		identity string
		ok       bool
	}{
		{"{Headers: [Authorization], ReauthorizeEvery: 300}", true},
		{"{Headers: [authorization]}", true},
		{"{Headers: [X-Api-Key]}", false},
		{"{Headers: [Authorization, X-Tenant]}", false},
		{"{Headers: [Authorization], QueryStrings: [tenant]}", false},
		{"{Headers: [Authorization], StageVariables: [v]}", false},
		{"{Headers: [Authorization], Context: [identity.sourceIp]}", false},
		{"{QueryStrings: [key]}", false},
		{"{}", false},
		{"{ReauthorizeEvery: 300}", false},
		{"{ReauthorizeEvery: 0}", false},
		{"null", false},
	}
	for _, tt := range tests {
		t.Run(tt.identity, func(t *testing.T) {
			parsed, err := samtemplate.Parse(fmt.Appendf(nil, minimalAPI, "[]", "REQUEST", tt.identity))
			if err != nil {
				t.Fatal(err)
			}
			_, err = apiFromTemplate(parsed)
			if got := err == nil; got != tt.ok {
				t.Errorf("apiFromTemplate(Identity %s) error = %v, want ok %v", tt.identity, err, tt.ok)
			}
		})
	}
}

// TestAuthorizerPayloadType checks that the devstack runs only a REQUEST
// authorizer, whose event the emulator sends: SAM's default, TOKEN, gets
// another event (a bare token) on AWS, so it is refused, not emulated.
func TestAuthorizerPayloadType(t *testing.T) {
	tests := []struct {
		payloadType string
		ok          bool
	}{
		{"REQUEST", true},
		{"TOKEN", false},
		{"request", false},
		{"null", false},
	}
	for _, tt := range tests {
		t.Run(tt.payloadType, func(t *testing.T) {
			parsed, err := samtemplate.Parse(fmt.Appendf(nil, minimalAPI, "[]", tt.payloadType, "{Headers: [Authorization]}"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = apiFromTemplate(parsed)
			if got := err == nil; got != tt.ok {
				t.Errorf("apiFromTemplate(FunctionPayloadType %s) error = %v, want ok %v", tt.payloadType, err, tt.ok)
			}
		})
	}
}
