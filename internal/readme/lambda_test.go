package readme

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/samtemplate"
	"github.com/oncehq/once/internal/sqstest"
)

// block returns the fenced code block that follows marker in the README.
func block(t *testing.T, readme, marker string) string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + " -->\\n```[a-z]+\\n(.*?)\\n```")
	m := re.FindStringSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md has no code block after <!-- %s -->", marker)
	}
	return m[1] + "\n"
}

// goCmd runs go in dir as a user would, with go's default flags (a build
// reads go.mod and go.sum and never changes them, -mod=readonly), but
// offline: the module cache has every module once needs, and the fresh
// module resolves once through a replace to this checkout.
func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestUseOnceInYourOwnLambda(t *testing.T) {
	root, readme := readRepoREADME(t)
	mainGo, templateYAML := block(t, readme, "readme:main.go"), block(t, readme, "readme:template.yaml")

	// A fresh module, then `go get github.com/oncehq/once` and nothing else.
	dir := t.TempDir()
	gomod := "module example.com/notes\n\ngo 1.26\n\nreplace github.com/oncehq/once => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(mainGo), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, dir, "get", "github.com/oncehq/once")
	bin := filepath.Join(dir, "bootstrap")
	goCmd(t, dir, "build", "-o", bin, ".")

	// The recovery function, beside it, with the resolvers it leaves to the
	// reader: it builds with once and the modules once requires, once the
	// README's `go get` of sqsqueue has added the SQS client's.
	rdir := filepath.Join(dir, "recovery")
	if err := os.Mkdir(rdir, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := "package main\n\nimport \"github.com/oncehq/once/idempotency\"\n\n" +
		"func resolvers() idempotency.Resolvers { return idempotency.Resolvers{} }\n"
	for name, src := range map[string]string{"main.go": block(t, readme, "readme:recovery/main.go"), "resolvers.go": stub} {
		if err := os.WriteFile(filepath.Join(rdir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	get := regexp.MustCompile("`go get (github.com/oncehq/once/idempotency/recovery/sqsqueue)`").FindStringSubmatch(readme)
	if get == nil {
		t.Fatal("README.md does not tell the recovery function's builder to `go get github.com/oncehq/once/idempotency/recovery/sqsqueue`")
	}
	goCmd(t, dir, "get", get[1])
	rbin := filepath.Join(dir, "recovery-bootstrap")
	goCmd(t, dir, "build", "-o", rbin, "./recovery")

	// The template entries' tables, in DynamoDB Local.
	tmpl, err := samtemplate.Parse([]byte(templateYAML))
	if err != nil {
		t.Fatalf("the README's template entries: %v", err)
	}
	stack := "readme-" + fmt.Sprint(time.Now().UnixNano())
	tables, err := tmpl.Tables(stack)
	if err != nil {
		t.Fatal(err)
	}
	client := dynamotest.Client(t)
	if err := samtemplate.Create(t.Context(), client, tables); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range tables {
			_, _ = client.DeleteTable(t.Context(), &dynamodb.DeleteTableInput{TableName: tb.Input.TableName})
		}
	})
	names := map[string]string{}
	for _, tb := range tables {
		names[tb.LogicalID] = aws.ToString(tb.Input.TableName)
	}
	fn, ok := tmpl.Functions()["NotesFunction"]
	if !ok {
		t.Fatal("the README's template entries have no NotesFunction")
	}
	env := []string{"DYNAMODB_ENDPOINT=" + dynamotest.Endpoint(t), "AWS_REGION=us-east-1"}
	for name, v := range fn.Environment() {
		ref := samtemplate.Refs(v)
		if len(ref) != 1 || names[ref[0].Name] == "" {
			t.Fatalf("NotesFunction's %s = %v, want a !Ref to a table of the entries", name, v)
		}
		env = append(env, name+"="+names[ref[0].Name])
	}

	// The function, under a Lambda Runtime API, its DynamoDB calls recorded
	// to hold them to its Policies.
	grants, err := policyGrants(fn)
	if err != nil {
		t.Fatalf("NotesFunction: %v", err)
	}
	calls, recorderURL := newIAMRecorder(t, dynamotest.Endpoint(t))
	// start runs an instance of the function (a cold start) under a Lambda
	// Runtime API of its own.
	start := func() *lambdatest.RuntimeAPI {
		t.Helper()
		rt := lambdatest.NewRuntimeAPI(t)
		cmd := exec.Command(bin)
		cmd.Env = append(env, "DYNAMODB_ENDPOINT="+recorderURL, "AWS_LAMBDA_RUNTIME_API="+rt.Addr(), "PATH="+os.Getenv("PATH"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("function stderr:\n%s", stderr.String())
			}
		})
		return rt
	}
	rt := start()

	type answer struct {
		status  int
		headers map[string]string
		body    string
	}
	post := func(tenant, key, body string) answer {
		t.Helper()
		ev := events.APIGatewayProxyRequest{
			Resource: "/v1/notes", Path: "/v1/notes", HTTPMethod: "POST", Body: body,
			Headers:           map[string]string{"Idempotency-Key": key, "Content-Type": "application/json"},
			MultiValueHeaders: map[string][]string{"Idempotency-Key": {key}, "Content-Type": {"application/json"}},
			RequestContext: events.APIGatewayProxyRequestContext{
				RequestID: "r-" + fmt.Sprint(time.Now().UnixNano()), DomainName: "api.example.com", Stage: "prod",
				Authorizer: map[string]any{"tenant": tenant, "principalId": tenant},
			},
		}
		payload, _ := json.Marshal(ev)
		out, err := rt.Invoke(t.Context(), payload)
		if err != nil {
			t.Fatalf("invoke: %v", err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("response %s: %v", out, err)
		}
		h := resp.Headers
		if h == nil {
			h = map[string]string{}
		}
		for k, v := range resp.MultiValueHeaders {
			h[k] = v[0]
		}
		return answer{resp.StatusCode, h, resp.Body}
	}

	first := post("acme", "note-1", `{"text":"hello"}`)
	if first.status != 201 || !strings.Contains(first.body, `"text":"hello"`) || first.headers["Location"] == "" {
		t.Fatalf("first = %+v, want 201 with the note", first)
	}
	again := post("acme", "note-1", `{ "text": "hello" }`)
	if again.status != 201 || again.body != first.body || again.headers["Idempotent-Replayed"] != "true" {
		t.Errorf("retry = %+v, want the first answer replayed", again)
	}
	if other := post("acme", "note-1", `{"text":"bye"}`); other.status != 422 || !strings.Contains(other.body, "idempotency_key_reused") {
		t.Errorf("same key, other text = %+v, want 422 idempotency_key_reused", other)
	}
	if bad := post("acme", "note-2", `{}`); bad.status != 400 || !strings.Contains(bad.body, `"field":"text"`) {
		t.Errorf("no text = %+v, want 400 naming text", bad)
	}
	if fixed := post("acme", "note-2", `{"text":"fixed"}`); fixed.status != 201 {
		t.Errorf("corrected retry = %+v, want 201 (a validation answer is not stored)", fixed)
	}
	if globex := post("globex", "note-1", `{"text":"hello"}`); globex.status != 201 || globex.body == first.body {
		t.Errorf("another tenant, same key = %+v, want its own 201", globex)
	}
	// Another instance, whose replay cache is empty, replays from the table.
	rt = start()
	if cold := post("acme", "note-1", `{"text":"hello"}`); cold.status != 201 || cold.body != first.body || cold.headers["Idempotent-Replayed"] != "true" {
		t.Errorf("retry to another instance = %+v, want the first answer replayed", cold)
	}

	// Every call the function made is one its Policies allow, as IAM would
	// authorize it (a transaction item by item).
	violations, checked := calls.violations(grants, names)
	for _, v := range violations {
		t.Errorf("NotesFunction called %s", v)
	}
	if checked == 0 {
		t.Error("no DynamoDB call of NotesFunction recorded")
	}
	out, err := client.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(names["NotesTable"]), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 3 {
		t.Errorf("%d notes written, want 3 (acme's two, globex's one)", len(out.Items))
	}

	recoveryCheck(t, rbin, env, names["IdempotencyTable"])
}

// recoveryCheck runs the README's recovery function as the checker: without
// its queue it does not start, saying why; with it, under a Lambda Runtime
// API, it releases an abandoned reservation, sends on the check of one whose
// lease runs for another hour (delayed by SQS's longest delay), and logs
// JSON lines only.
func recoveryCheck(t *testing.T, bin string, env []string, table string) {
	env = append(env, "RECOVERY_ROLE=check", "IDEMPOTENCY_TABLE="+table, "PATH="+os.Getenv("PATH"))
	cmd := exec.Command(bin)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `queue URL ""`) {
		t.Errorf("the recovery function without CHECK_QUEUE_URL = %v, %q; want it to stop naming the empty queue URL", err, out)
	}

	sqsEndpoint := sqstest.Endpoint(t)
	sq := sqstest.Client(t, sqsEndpoint)
	queueURL := sqstest.Queue(t, sq, "checks", nil)
	store := dynamo.New(dynamotest.Client(t), table)
	now := time.Now()
	reserve := func(raw string, deadline time.Time) idempotency.Record {
		t.Helper()
		rec := idempotency.Record{
			Key: idempotency.NewKey("acme", raw), Status: idempotency.StatusInProgress, Route: "POST /v1/notes",
			Fingerprint: "f1", LeaseToken: idempotency.NewToken(), ExpiresAt: deadline, CreatedAt: now, UpdatedAt: now,
		}
		if err := store.Reserve(t.Context(), rec, nil, now); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// The abandoned reservation's lease runs out a second from now. Its TTL
	// attribute (expires_at, the lease's end for a reservation; the lease
	// itself is expires_at_ms) is moved an hour on while it is still in the
	// future: DynamoDB Local's TTL deletes an expired item within seconds
	// (AWS's within days), and would leave the checker nothing to release.
	lease := now.Add(time.Second)
	abandoned, running := reserve("abandoned", lease), reserve("running", now.Add(time.Hour))
	if _, err := dynamotest.Client(t).UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: abandoned.Key.ID()}},
		UpdateExpression:          aws.String("SET #ttl = :later"),
		ConditionExpression:       aws.String("attribute_exists(#pk) AND #ttl > :now"),
		ExpressionAttributeNames:  map[string]string{"#ttl": dynamo.AttrExpiresAt, "#pk": dynamo.AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":later": &types.AttributeValueMemberN{Value: fmt.Sprint(now.Add(time.Hour).Unix())}, ":now": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Unix())}},
	}); err != nil {
		t.Fatalf("move the abandoned reservation's TTL on: %v", err)
	}
	time.Sleep(time.Until(lease) + 100*time.Millisecond)

	rt := lambdatest.NewRuntimeAPI(t)
	cmd = exec.Command(bin)
	cmd.Env = append(env, "AWS_LAMBDA_RUNTIME_API="+rt.Addr(), "SQS_ENDPOINT="+sqsEndpoint, "CHECK_QUEUE_URL="+queueURL)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for line := range strings.Lines(stderr.String()) {
			if !json.Valid([]byte(line)) {
				t.Errorf("the recovery function logged %q, want JSON lines only", line)
			}
		}
		if !strings.Contains(stderr.String(), `"msg":"abandoned reservation released"`) {
			t.Errorf("the recovery function's log = %q, want the release logged", stderr.String())
		}
	}()
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: recovery.NewCheck(abandoned).Encode()},
		{MessageId: "m2", Body: recovery.NewCheck(running).Encode()},
	}}
	payload, _ := json.Marshal(ev)
	res, err := rt.Invoke(t.Context(), payload)
	if err != nil {
		t.Fatalf("invoke the checker: %v", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(res, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("the checker answered %s, %v; want no batch item failures", res, err)
	}
	if _, err := store.Get(t.Context(), abandoned.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("the abandoned reservation: Get() = %v, want ErrNotFound (released)", err)
	}
	if got, err := store.Get(t.Context(), running.Key); err != nil || got.LeaseToken != running.LeaseToken {
		t.Errorf("the running reservation: Get() = %+v, %v; want it untouched", got, err)
	}
	if visible, inFlight, delayed := sqstest.Counts(t, sq, queueURL); visible != "0" || inFlight != "0" || delayed != "1" {
		t.Errorf("check queue: %s visible, %s in flight, %s delayed; want the running one's check sent on, delayed", visible, inFlight, delayed)
	}
}

// readRepoREADME returns the repository's root and its README's text.
func readRepoREADME(t *testing.T) (root, readme string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return root, string(raw)
}
