package samtemplate

import (
	"fmt"
	"sort"
	"strings"
)

// eventTypes are the resource types the SAM transform generates for each
// event source type of an AWS::Serverless::Function (SAM specification,
// "EventSource"; samtranslator/model/eventsources): a push source gets a
// permission for its service to invoke the function, a poll source an event
// source mapping.
var eventTypes = map[string][]string{
	"Api":              {"AWS::Lambda::Permission"},
	"Schedule":         {"AWS::Events::Rule", "AWS::Lambda::Permission"},
	"CloudWatchEvent":  {"AWS::Events::Rule", "AWS::Lambda::Permission"},
	"EventBridgeRule":  {"AWS::Events::Rule", "AWS::Lambda::Permission"},
	"ScheduleV2":       {"AWS::Scheduler::Schedule", "AWS::IAM::Role"},
	"SNS":              {"AWS::SNS::Subscription", "AWS::Lambda::Permission"},
	"S3":               {"AWS::Lambda::Permission"},
	"CloudWatchLogs":   {"AWS::Logs::SubscriptionFilter", "AWS::Lambda::Permission"},
	"SQS":              {"AWS::Lambda::EventSourceMapping"},
	"DynamoDB":         {"AWS::Lambda::EventSourceMapping"},
	"Kinesis":          {"AWS::Lambda::EventSourceMapping"},
	"MQ":               {"AWS::Lambda::EventSourceMapping"},
	"MSK":              {"AWS::Lambda::EventSourceMapping"},
	"SelfManagedKafka": {"AWS::Lambda::EventSourceMapping"},
	"DocumentDB":       {"AWS::Lambda::EventSourceMapping"},
}

// DeployedTypes returns the resource types a stack of the template is made
// of once the SAM transform has expanded it, each with the logical IDs of
// the template's resources that bring it (a condition's resources
// included): resources of other types as they are; an
// AWS::Serverless::Function as its AWS::Lambda::Function, the role SAM
// creates when it has none, its function URL, and what each of its events
// generates (eventTypes); an AWS::Serverless::Api as its REST API,
// deployment and stage, and a permission per Lambda authorizer. What the
// transform would make of anything else it does not guess: a Serverless
// resource type, an event type or a function property that generates
// resources it does not know is an error.
func (t *Template) DeployedTypes() (map[string][]string, error) {
	out := map[string][]string{}
	add := func(id string, types ...string) {
		for _, typ := range types {
			if ids := out[typ]; len(ids) == 0 || ids[len(ids)-1] != id {
				out[typ] = append(out[typ], id)
			}
		}
	}
	resources := t.Resources()
	ids := make([]string, 0, len(resources))
	for id := range resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	functions := t.Functions()
	for _, id := range ids {
		r := resources[id]
		switch {
		case r.Type == "AWS::Serverless::Function":
			fn := functions[id]
			add(id, "AWS::Lambda::Function")
			if _, ok := fn.Properties["Role"]; !ok {
				add(id, "AWS::IAM::Role")
			}
			if url, ok := fn.Properties["FunctionUrlConfig"]; ok {
				add(id, "AWS::Lambda::Url")
				// SAM adds the public invoke permission only to a URL
				// without IAM auth (AuthType NONE).
				if m, _ := url.(map[string]any); m["AuthType"] == "NONE" {
					add(id, "AWS::Lambda::Permission")
				}
			}
			if _, ok := fn.Properties["AutoPublishAlias"]; ok {
				add(id, "AWS::Lambda::Version", "AWS::Lambda::Alias")
			}
			for _, p := range []string{"DeploymentPreference", "EventInvokeConfig"} {
				if _, ok := fn.Properties[p]; ok {
					return nil, fmt.Errorf("samtemplate: %s: the resources SAM generates for %s are not known here", id, p)
				}
			}
			for _, ev := range fn.Events() {
				types, ok := eventTypes[ev.Type]
				if !ok {
					return nil, fmt.Errorf("samtemplate: %s: event %s: the resources SAM generates for type %q are not known here", id, ev.Name, ev.Type)
				}
				if ev.Type == "Api" && ev.Properties["RestApiId"] == nil {
					// SAM's implicit ServerlessRestApi.
					add(id, "AWS::ApiGateway::RestApi", "AWS::ApiGateway::Deployment", "AWS::ApiGateway::Stage")
				}
				add(id, types...)
			}
		case r.Type == "AWS::Serverless::Api":
			add(id, "AWS::ApiGateway::RestApi", "AWS::ApiGateway::Deployment", "AWS::ApiGateway::Stage")
			auth, _ := r.Properties["Auth"].(map[string]any)
			if authorizers, _ := auth["Authorizers"].(map[string]any); len(authorizers) > 0 {
				add(id, "AWS::Lambda::Permission")
			}
			for _, p := range []string{"Domain", "UsagePlan"} {
				if _, ok := r.Properties[p]; ok {
					return nil, fmt.Errorf("samtemplate: %s: the resources SAM generates for %s are not known here", id, p)
				}
			}
		case r.Type == "AWS::Serverless::SimpleTable":
			add(id, "AWS::DynamoDB::Table")
		case r.Type == "AWS::Serverless::LayerVersion":
			add(id, "AWS::Lambda::LayerVersion")
		case strings.HasPrefix(r.Type, "AWS::Serverless::"):
			return nil, fmt.Errorf("samtemplate: %s: the resources SAM generates for %s are not known here", id, r.Type)
		default:
			add(id, r.Type)
		}
	}
	return out, nil
}
