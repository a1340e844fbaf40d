package deploytest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/samtemplate"
)

var streamRead = []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}

// invokeURL is what calling a function URL whose AuthType is AWS_IAM takes,
// for function URLs created since October 2025.
var invokeURL = []string{"lambda:InvokeFunction", "lambda:InvokeFunctionUrl"}

// queueRead is what an SQS event source mapping needs of its queue, as
// Lambda documents it (AWSLambdaSQSQueueExecutionRole).
var queueRead = []string{"sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"}

// The only managed policies a function role may have: CloudWatch Logs and
// X-Ray, which AWS scopes to "*" itself.
var allowedManaged = []any{
	map[string]any{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"},
	map[string]any{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AWSXRayDaemonWriteAccess"},
}

// functionGrants returns the resource -> actions that fn's role grants,
// failing the test on anything but exact Allow statements on the template's
// own resources. A statement may exist only under DeployProvider:
// !If [DeployProvider, <statement>, !Ref AWS::NoValue].
func functionGrants(t *testing.T, id string, fn samtemplate.Function) map[string][]string {
	t.Helper()
	resources := template(t).Resources()
	if _, ok := fn.Properties["Policies"]; ok {
		t.Errorf("%s has Policies; use its own role (SAM's generated roles add managed policies on \"*\")", id)
	}
	refs := samtemplate.Refs(fn.Properties["Role"])
	if len(refs) != 1 || refs[0].Attribute != "Arn" || resources[refs[0].Name].Type != "AWS::IAM::Role" {
		t.Errorf("%s Role = %v, want !GetAtt <role>.Arn", id, fn.Properties["Role"])
		return nil
	}
	roleID := refs[0].Name
	for other, f := range template(t).Functions() {
		if other != id && cmp.Equal(f.Properties["Role"], fn.Properties["Role"]) {
			t.Errorf("%s and %s share the role %s", id, other, roleID)
		}
	}
	role := resources[roleID]
	if got, want := role.Raw["Condition"], fn.Raw["Condition"]; got != want {
		t.Errorf("%s Condition = %v, want the function's, %v", roleID, got, want)
	}
	trust := mapOf(role.Properties["AssumeRolePolicyDocument"])
	wantTrust := map[string]any{"Version": "2012-10-17", "Statement": []any{map[string]any{
		"Effect": "Allow", "Principal": map[string]any{"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole",
	}}}
	if diff := cmp.Diff(wantTrust, trust); diff != "" {
		t.Errorf("%s AssumeRolePolicyDocument mismatch (-want +got):\n%s", roleID, diff)
	}
	if diff := cmp.Diff(allowedManaged, role.Properties["ManagedPolicyArns"]); diff != "" {
		t.Errorf("%s ManagedPolicyArns mismatch (-want +got):\n%s", roleID, diff)
	}
	for _, k := range []string{"PermissionsBoundary", "RoleName", "Path"} {
		if _, ok := role.Properties[k]; ok {
			t.Errorf("%s sets %s", roleID, k)
		}
	}
	grants := map[string][]string{}
	for _, p := range list(role.Properties["Policies"]) {
		doc := mapOf(mapOf(p)["PolicyDocument"])
		for _, raw := range list(doc["Statement"]) {
			st := mapOf(raw)
			if args, ok := st["Fn::If"].([]any); ok {
				if len(args) != 3 || args[0] != "DeployProvider" || !cmp.Equal(args[2], map[string]any{"Ref": "AWS::NoValue"}) {
					t.Errorf("%s: statement %v: the only !If allowed is [DeployProvider, <statement>, !Ref AWS::NoValue]", roleID, st)
					continue
				}
				st = mapOf(args[1])
			}
			for _, k := range []string{"NotAction", "NotResource", "NotPrincipal", "Condition"} {
				if _, ok := st[k]; ok {
					t.Errorf("%s: statement %v uses %s", roleID, st["Sid"], k)
				}
			}
			if st["Effect"] != "Allow" {
				t.Errorf("%s: statement %v Effect = %v, want Allow", roleID, st["Sid"], st["Effect"])
			}
			var actions []string
			for _, a := range list(st["Action"]) {
				s, _ := a.(string)
				if s == "" || strings.Contains(s, "*") {
					t.Errorf("%s: statement %v action %v: want exact actions, no wildcards", roleID, st["Sid"], a)
					continue
				}
				actions = append(actions, s)
			}
			for _, r := range list(st["Resource"]) {
				res, err := grantResource(r, resources)
				if err != nil {
					t.Errorf("%s: statement %v: %v", roleID, st["Sid"], err)
					continue
				}
				grants[res] = append(grants[res], actions...)
			}
		}
	}
	for res := range grants {
		sort.Strings(grants[res])
	}
	return grants
}

// grantResource resolves a statement's Resource to a logical ID,
// <Table>/stream for a table's stream, or <Table>/index for its indexes.
func grantResource(r any, resources map[string]samtemplate.Resource) (string, error) {
	m := mapOf(r)
	if m == nil {
		return "", fmt.Errorf("resource %v is not a reference to the template's resources", r)
	}
	if sub, ok := m["Fn::Sub"].(string); ok && len(m) == 1 {
		// "${Table.Arn}/stream/*": every stream of that one table;
		// "${Table.Arn}/index/*": its global secondary indexes.
		refs := samtemplate.Refs(r)
		if len(refs) == 1 && refs[0].Attribute == "Arn" && resources[refs[0].Name].Type == "AWS::DynamoDB::Table" {
			for _, part := range []string{"stream", "index"} {
				if sub == "${"+refs[0].String()+"}/"+part+"/*" {
					return refs[0].Name + "/" + part, nil
				}
			}
		}
		return "", fmt.Errorf("resource !Sub %q is neither ${Table.Arn}/stream/* nor ${Table.Arn}/index/*", sub)
	}
	ga, ok := m["Fn::GetAtt"].([]any)
	if !ok || len(m) != 1 || len(ga) != 2 {
		return "", fmt.Errorf("resource %v is not !GetAtt <resource>.Arn or .StreamArn", r)
	}
	id, _ := ga[0].(string)
	attr, _ := ga[1].(string)
	typ := resources[id].Type
	switch {
	case attr == "Arn" && (typ == "AWS::DynamoDB::Table" || typ == "AWS::SQS::Queue"):
		return id, nil
	case attr == "StreamArn" && typ == "AWS::DynamoDB::Table":
		return id + "/stream", nil
	case attr == "Arn" && typ == "AWS::Serverless::Function":
		return id, nil
	}
	return "", fmt.Errorf("resource !GetAtt %s.%s (%s) is not a table, stream, queue or function ARN", id, attr, typ)
}

// TestLeastPrivilege derives each function's grants and checks that its
// role grants exactly them:
//
//   - on its tables, only DynamoDB actions its code can call (dynamoNeeds;
//     TestGrantsCoverCode checks the converse), on exactly the tables its
//     environment names; on a table's indexes only Query and Scan, where
//     the code can call them, on a table with indexes;
//   - on a table's stream, exactly what Lambda's event source mapping needs
//     (streamRead), for exactly the streams its mappings read;
//   - on a function, exactly what calling its AWS_IAM function URL takes
//     (invokeURL), for exactly the URLs its environment names;
//   - on queues, what TestQueueGrantsFromCode derives, on exactly its
//     mappings' queues and destinations and the queues its environment
//     names.
//
// Which table each action is needed on the scan cannot tell: an action the
// code needs for one table may be granted on another of its tables.
func TestLeastPrivilege(t *testing.T) {
	for id, fn := range template(t).Functions() {
		got := functionGrants(t, id, fn)
		needs := map[string]string{}
		if folder := samtemplate.FunctionFolder(id); hasFolder(t, folder) {
			needs = dynamoNeeds(t, folder)
		}
		for _, res := range sortedKeys(got) {
			actions := got[res]
			table, part, _ := strings.Cut(res, "/")
			typ := template(t).Resources()[table].Type
			switch {
			case part == "stream":
				if diff := cmp.Diff(streamRead, actions); diff != "" {
					t.Errorf("%s grants on %s mismatch (-want +got):\n%s", id, res, diff)
				}
			case typ == "AWS::Serverless::Function":
				if diff := cmp.Diff(invokeURL, actions); diff != "" {
					t.Errorf("%s grants on %s mismatch (-want +got):\n%s", id, res, diff)
				}
			case typ == "AWS::DynamoDB::Table":
				for _, a := range actions {
					if _, ok := needs[a]; !ok {
						t.Errorf("%s: the role grants %s on %s, which its code cannot call", id, a, res)
					}
					if part == "index" && a != "dynamodb:Query" && a != "dynamodb:Scan" {
						t.Errorf("%s: the role grants %s on %s; an index only takes Query and Scan", id, a, res)
					}
				}
				if part == "index" && template(t).Resources()[table].Properties["GlobalSecondaryIndexes"] == nil {
					t.Errorf("%s: the role grants on %s, which has no indexes", id, res)
				}
				if len(actions) != len(slices.Compact(slices.Clone(actions))) {
					t.Errorf("%s: the role grants %v on %s, with duplicates", id, actions, res)
				}
			}
		}
		// The tables it may touch are the tables it is told about, and the
		// functions it may invoke those whose URL it is told about...
		var envTables, grantTables, envURLs, grantFunctions []string
		for _, v := range fn.Environment() {
			for _, r := range samtemplate.Refs(v) {
				if template(t).Resources()[r.Name].Type == "AWS::DynamoDB::Table" {
					envTables = append(envTables, r.Name)
				}
				if fnID, ok := strings.CutSuffix(r.Name, "Url"); ok && r.Attribute == "FunctionUrl" {
					envURLs = append(envURLs, fnID)
				}
			}
		}
		// ...its stream grants are its mappings' streams, and its queue
		// grants its mappings' on-failure destinations and queues, and the
		// queues it is told about.
		var streams, queues, grantStreams, grantQueues []string
		for _, ev := range fn.Events() {
			switch ev.Type {
			case "DynamoDB":
				for _, r := range samtemplate.Refs(ev.Properties["Stream"]) {
					streams = append(streams, r.Name+"/stream")
				}
				for _, r := range samtemplate.Refs(mapOf(mapOf(ev.Properties["DestinationConfig"])["OnFailure"])["Destination"]) {
					queues = append(queues, r.Name)
				}
			case "SQS":
				for _, r := range samtemplate.Refs(ev.Properties["Queue"]) {
					queues = append(queues, r.Name)
				}
			}
		}
		for _, v := range fn.Environment() {
			for _, r := range samtemplate.Refs(v) {
				if template(t).Resources()[r.Name].Type == "AWS::SQS::Queue" && !slices.Contains(queues, r.Name) {
					queues = append(queues, r.Name)
				}
			}
		}
		for res := range got {
			switch {
			case strings.HasSuffix(res, "/stream"):
				grantStreams = append(grantStreams, res)
			case strings.HasSuffix(res, "/index"):
				if table := strings.TrimSuffix(res, "/index"); !slices.Contains(envTables, table) {
					t.Errorf("%s: the role grants on %s, a table its environment does not name", id, res)
				}
			case template(t).Resources()[res].Type == "AWS::SQS::Queue":
				grantQueues = append(grantQueues, res)
			case template(t).Resources()[res].Type == "AWS::Serverless::Function":
				grantFunctions = append(grantFunctions, res)
			default:
				grantTables = append(grantTables, res)
			}
		}
		for _, pair := range []struct {
			what      string
			want, got []string
		}{
			{"tables (environment vs grants)", envTables, grantTables}, {"streams", streams, grantStreams}, {"queues", queues, grantQueues},
			{"functions (URLs in the environment vs grants)", envURLs, grantFunctions},
		} {
			sort.Strings(pair.want)
			sort.Strings(pair.got)
			if diff := cmp.Diff(pair.want, pair.got); diff != "" {
				t.Errorf("%s %s mismatch (-uses +granted):\n%s", id, pair.what, diff)
			}
		}
	}
}

// dynamoActions maps the DynamoDB client's methods to the IAM actions they
// need; TransactWriteItems needs the actions of its items (see
// transactItems), TransactGetItems GetItem.
var dynamoActions = map[string]string{
	"GetItem": "dynamodb:GetItem", "PutItem": "dynamodb:PutItem", "UpdateItem": "dynamodb:UpdateItem",
	"DeleteItem": "dynamodb:DeleteItem", "Query": "dynamodb:Query", "Scan": "dynamodb:Scan",
	"BatchGetItem": "dynamodb:BatchGetItem", "BatchWriteItem": "dynamodb:BatchWriteItem",
	"TransactGetItems": "dynamodb:GetItem", "ExecuteStatement": "dynamodb:PartiQLSelect",
}

var transactItems = map[string]string{
	"Put": "dynamodb:PutItem", "Update": "dynamodb:UpdateItem", "Delete": "dynamodb:DeleteItem",
	"ConditionCheck": "dynamodb:ConditionCheckItem",
}

// dynamoNeeds returns the IAM actions of the DynamoDB operations the code
// reachable from functions/<folder> can call, with the call that needs each.
// An operation counts when the code both selects its method (x.Query) and
// names its input type (dynamodb.QueryInput), so that url.URL's Query does
// not; TransactWriteItems counts the actions of the item types it names.
func dynamoNeeds(t *testing.T, folder string) map[string]string {
	t.Helper()
	const (
		sdk      = "github.com/aws/aws-sdk-go-v2/service/dynamodb."
		sdkTypes = "github.com/aws/aws-sdk-go-v2/service/dynamodb/types."
	)
	s := scanFunction(t, folder)
	need := map[string]string{}
	for method, action := range dynamoActions {
		if s.Selected[method] && s.Qualified[sdk+method+"Input"] {
			need[action] = method
		}
	}
	if s.Selected["TransactWriteItems"] && s.Qualified[sdk+"TransactWriteItemsInput"] {
		for item, action := range transactItems {
			if s.Qualified[sdkTypes+item] {
				need[action] = "TransactWriteItems with types." + item
			}
		}
	}
	return need
}

// TestGrantsCoverCode checks that every DynamoDB operation the code
// reachable from functions/<name> can call (dynamoNeeds) is granted on some
// table (which table, the scan cannot tell).
func TestGrantsCoverCode(t *testing.T) {
	for id, fn := range template(t).Functions() {
		folder := samtemplate.FunctionFolder(id)
		if !hasFolder(t, folder) {
			continue
		}
		need := dynamoNeeds(t, folder)
		granted := map[string]bool{}
		for _, actions := range functionGrants(t, id, fn) {
			for _, a := range actions {
				granted[a] = true
			}
		}
		for _, action := range sortedKeys(need) {
			if !granted[action] {
				t.Errorf("%s: the code can call %s but the role does not grant %s", id, need[action], action)
			}
		}
	}
}

// sqsActions maps the SQS client's methods to the IAM actions they need.
var sqsActions = map[string]string{
	"SendMessage": "sqs:SendMessage", "SendMessageBatch": "sqs:SendMessage",
	"ReceiveMessage": "sqs:ReceiveMessage", "DeleteMessage": "sqs:DeleteMessage", "DeleteMessageBatch": "sqs:DeleteMessage",
	"ChangeMessageVisibility": "sqs:ChangeMessageVisibility", "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
	"GetQueueUrl": "sqs:GetQueueUrl", "GetQueueAttributes": "sqs:GetQueueAttributes", "PurgeQueue": "sqs:PurgeQueue",
	"CreateQueue": "sqs:CreateQueue", "DeleteQueue": "sqs:DeleteQueue", "SetQueueAttributes": "sqs:SetQueueAttributes",
	"ListQueues": "sqs:ListQueues", "ListDeadLetterSourceQueues": "sqs:ListDeadLetterSourceQueues",
}

// TestQueueGrantsFromCode derives each function's SQS grants and checks that
// the role grants exactly them, on each queue: the actions its code can call
// (method selected and input type named, as for DynamoDB) on the queues its
// environment names; ReceiveMessage, DeleteMessage and GetQueueAttributes on
// the queue its event source mapping reads, which Lambda calls; and
// SendMessage on its stream mappings' on-failure destinations, which Lambda
// sends to.
func TestQueueGrantsFromCode(t *testing.T) {
	const sdk = "github.com/aws/aws-sdk-go-v2/service/sqs."
	for id, fn := range template(t).Functions() {
		folder := samtemplate.FunctionFolder(id)
		if !hasFolder(t, folder) {
			continue
		}
		s := scanFunction(t, folder)
		var code []string
		for method, action := range sqsActions {
			if s.Selected[method] && s.Qualified[sdk+method+"Input"] {
				code = append(code, action)
			}
		}
		need := map[string][]string{}
		add := func(queue string, actions ...string) {
			for _, a := range actions {
				if !slices.Contains(need[queue], a) {
					need[queue] = append(need[queue], a)
				}
			}
		}
		for _, v := range fn.Environment() {
			for _, r := range samtemplate.Refs(v) {
				if template(t).Resources()[r.Name].Type == "AWS::SQS::Queue" {
					if len(code) == 0 {
						t.Errorf("%s is told about queue %s but its code makes no SQS call", id, r.Name)
					}
					add(r.Name, code...)
				}
			}
		}
		for _, ev := range fn.Events() {
			for _, r := range samtemplate.Refs(mapOf(mapOf(ev.Properties["DestinationConfig"])["OnFailure"])["Destination"]) {
				add(r.Name, "sqs:SendMessage")
			}
			if ev.Type == "SQS" {
				for _, r := range samtemplate.Refs(ev.Properties["Queue"]) {
					add(r.Name, queueRead...)
				}
			}
		}
		got := map[string][]string{}
		for res, actions := range functionGrants(t, id, fn) {
			if template(t).Resources()[res].Type == "AWS::SQS::Queue" {
				got[res] = actions
			}
		}
		for q := range need {
			sort.Strings(need[q])
		}
		if len(need) == 0 {
			need = map[string][]string{}
		}
		if diff := cmp.Diff(need, got); diff != "" {
			t.Errorf("%s SQS grants mismatch (-derived +granted):\n%s", id, diff)
		}
	}
}

// tableGrants are, for the roles whose code writes several tables, the
// DynamoDB actions each table needs, read from the code: which table an
// action is needed on dynamoNeeds cannot tell (TestLeastPrivilege).
var tableGrants = map[string]map[string][]string{
	// internal/reconciler's Resolvers. The store (idempotency/dynamo):
	// Get (GetItem, a large body's chunks BatchGetItem), the resolution
	// committed (TransactWriteItems: Put, Update, Delete items of the
	// record and its chunks). The refunds resolver: Completion inserts the
	// refund (dynamo.Insert: Put) and moves the hold on its payment
	// (dynamo.Update), Release gives the hold back (dynamo.Update); the
	// payment is never read nor put. The orders resolver: the order read
	// before its charge (orders.Table.Get: GetItem), the order and its
	// receipt job upserted (dynamo.Update). The charges resolver writes no
	// table of its own.
	"ReconcilerFunction": {
		"IdempotencyTable": {"dynamodb:BatchGetItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
		"PaymentsTable":    {"dynamodb:UpdateItem"},
		"OrdersTable":      {"dynamodb:GetItem", "dynamodb:UpdateItem"},
		"OutboxTable":      {"dynamodb:UpdateItem"},
		"RefundsTable":     {"dynamodb:PutItem"},
	},
}

// TestTableGrants checks that the roles of tableGrants grant exactly its
// actions on each table, no more.
func TestTableGrants(t *testing.T) {
	for _, id := range sortedKeys(tableGrants) {
		fn, ok := template(t).Functions()[id]
		if !ok {
			t.Errorf("tableGrants names %s, which is not a function", id)
			continue
		}
		got := map[string][]string{}
		for res, actions := range functionGrants(t, id, fn) {
			if template(t).Resources()[res].Type == "AWS::DynamoDB::Table" {
				got[res] = actions
			}
		}
		if diff := cmp.Diff(tableGrants[id], got); diff != "" {
			t.Errorf("%s table grants mismatch (-needed +granted):\n%s", id, diff)
		}
	}
}
