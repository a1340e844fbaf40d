package devstack

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/samtemplate"
)

// TestAPIBinaryMediaTypes checks that the emulator gets the Api's
// BinaryMediaTypes as API Gateway does, SAM's ~1 read as a slash: none from
// template.yaml, so that every body reaches the api function as text.
func TestAPIBinaryMediaTypes(t *testing.T) {
	const minimal = `
Resources:
  Api:
    Type: AWS::Serverless::Api
    Properties:
      StageName: prod
      BinaryMediaTypes: [image~1png, "*~1*"]
      Auth:
        DefaultAuthorizer: A
        Authorizers:
          A:
            FunctionPayloadType: REQUEST
  ApiFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Create:
          Type: Api
          Properties: {Path: /v1/payments, Method: post}
`
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
