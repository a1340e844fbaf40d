package samtemplate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDeployedTypes(t *testing.T) {
	for _, c := range []struct {
		name, resources string
		want            map[string][]string
		err             string
	}{{
		name: "schedule",
		resources: `
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Role: !GetAtt R.Arn
      Events:
        Hourly: {Type: Schedule, Properties: {Schedule: rate(1 hour)}}
  R: {Type: AWS::IAM::Role}`,
		want: map[string][]string{
			"AWS::Lambda::Function": {"Fn"}, "AWS::Events::Rule": {"Fn"}, "AWS::Lambda::Permission": {"Fn"},
			"AWS::IAM::Role": {"R"},
		},
	}, {
		name: "poll sources, no role, a function URL, a conditional queue",
		resources: `
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      FunctionUrlConfig: {AuthType: AWS_IAM}
      Events:
        Q: {Type: SQS, Properties: {Queue: !GetAtt Q.Arn}}
        S: {Type: DynamoDB, Properties: {Stream: !GetAtt T.StreamArn}}
  Q: {Type: AWS::SQS::Queue, Condition: C}
  T: {Type: AWS::DynamoDB::Table}`,
		want: map[string][]string{
			"AWS::Lambda::Function": {"Fn"}, "AWS::IAM::Role": {"Fn"}, "AWS::Lambda::Url": {"Fn"},
			"AWS::Lambda::EventSourceMapping": {"Fn"},
			"AWS::SQS::Queue":                 {"Q"}, "AWS::DynamoDB::Table": {"T"},
		},
	}, {
		name: "a public function URL: SAM adds its invoke permission",
		resources: `
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Role: !GetAtt R.Arn
      FunctionUrlConfig: {AuthType: NONE}
  R: {Type: AWS::IAM::Role}`,
		want: map[string][]string{
			"AWS::Lambda::Function": {"Fn"}, "AWS::Lambda::Url": {"Fn"}, "AWS::Lambda::Permission": {"Fn"},
			"AWS::IAM::Role": {"R"},
		},
	}, {
		name: "an API with an authorizer, and an implicit API",
		resources: `
  Api:
    Type: AWS::Serverless::Api
    Properties:
      Auth: {Authorizers: {A: {FunctionArn: !GetAtt Fn.Arn}}}
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Role: !GetAtt R.Arn
      Events:
        Get: {Type: Api, Properties: {Path: /, Method: get}}`,
		want: map[string][]string{
			"AWS::ApiGateway::RestApi": {"Api", "Fn"}, "AWS::ApiGateway::Deployment": {"Api", "Fn"},
			"AWS::ApiGateway::Stage": {"Api", "Fn"}, "AWS::Lambda::Permission": {"Api", "Fn"},
			"AWS::Lambda::Function": {"Fn"},
		},
	}, {
		name: "an unknown event type",
		resources: `
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Rule: {Type: IoTRule, Properties: {Sql: "SELECT 1"}}`,
		err: `event Rule: the resources SAM generates for type "IoTRule" are not known here`,
	}, {
		name: "an unknown Serverless type",
		resources: `
  M: {Type: AWS::Serverless::StateMachine}`,
		err: "AWS::Serverless::StateMachine are not known here",
	}, {
		name: "a deployment preference",
		resources: `
  Fn:
    Type: AWS::Serverless::Function
    Properties: {AutoPublishAlias: live, DeploymentPreference: {Type: AllAtOnce}}`,
		err: "DeploymentPreference are not known here",
	}} {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse([]byte("Resources:" + c.resources))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.DeployedTypes()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("DeployedTypes error = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("DeployedTypes mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
