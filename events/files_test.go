package events_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/samtemplate"
	"github.com/oncehq/once/internal/tenant"
)

// template returns the parsed template.yaml.
func template(t *testing.T) *samtemplate.Template {
	t.Helper()
	tmpl, err := samtemplate.Load(dynamotest.TemplatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// functionOf returns the logical ID of the function an event file is for,
// from its name's prefix: api-create-payment.json is for ApiFunction.
func functionOf(file string) string {
	prefix, _, _ := strings.Cut(file, "-")
	return samtemplate.FunctionLogicalID(prefix)
}

func TestEveryFileHasACase(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && !strings.HasSuffix(e.Name(), "_test.go") {
			files = append(files, e.Name())
		}
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(fixtures)), files); diff != "" {
		t.Errorf("events/ mismatch (-cases +files):\n%s", diff)
	}
	fns := template(t).Functions()
	for _, f := range files {
		if _, ok := fns[functionOf(f)]; filepath.Ext(f) != ".json" || !ok {
			t.Errorf("%s: want <function>-<case>.json, <function> the folder of a function of template.yaml", f)
		}
	}
}

// streamTrigger is a function's DynamoDB event source in the template.
type streamTrigger struct {
	table    string // logical ID
	ttl      string // the table's TTL attribute, "" without TTL
	patterns []string
}

func streamTriggers(t *testing.T) map[string]streamTrigger {
	t.Helper()
	tables, err := template(t).Tables("once")
	if err != nil {
		t.Fatal(err)
	}
	ttl := map[string]string{}
	for _, tb := range tables {
		ttl[tb.LogicalID] = tb.TTLAttribute
	}
	out := map[string]streamTrigger{}
	for id, fn := range template(t).Functions() {
		for _, ev := range fn.Events() {
			if ev.Type != "DynamoDB" {
				continue
			}
			getAtt, _ := ev.Properties["Stream"].(map[string]any)["Fn::GetAtt"].([]any)
			if len(getAtt) != 2 {
				t.Fatalf("%s: Stream = %v, want !GetAtt <table>.StreamArn", id, ev.Properties["Stream"])
			}
			patterns, err := ev.FilterPatterns()
			if err != nil {
				t.Fatal(err)
			}
			table := fmt.Sprint(getAtt[0])
			out[id] = streamTrigger{table: table, ttl: ttl[table], patterns: patterns}
		}
	}
	return out
}

// alsoDelivered names, per stream event file, the other functions its
// records reach: a move to UNKNOWN reaches the sweeper too, whose scheduler
// arms the record's check, due at its expiry (the checker hands it to the
// reconciler again then if it is still UNKNOWN).
var alsoDelivered = map[string][]string{
	"reconciler-unknown.json":       {"SweeperFunction"},
	"reconciler-unknown-order.json": {"SweeperFunction"},
}

// TestStreamFilters holds every record of the stream event files to the
// FilterCriteria of the functions on the same stream: a record reaches the
// function it is a fixture of (an event Lambda would never deliver would be
// no use to `sam local invoke`), and no other but those alsoDelivered names.
// The filters cannot tell
// everything apart: the worker's poison record is a pending INSERT, and the
// sweeper's release is a REMOVE of an IN_PROGRESS record like a TTL deletion;
// the handlers tell them apart (TestEvents). Each file's eventSourceARN names
// its table as deployed by samconfig.toml's stack.
func TestStreamFilters(t *testing.T) {
	triggers := streamTriggers(t)
	cfg, err := samtemplate.LoadSAMConfig(filepath.Join(filepath.Dir(dynamotest.TemplatePath(t)), "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	stackName := fmt.Sprint(cfg.Parameters("default", "deploy")["stack_name"])
	tables, err := template(t).Tables(stackName)
	if err != nil {
		t.Fatal(err)
	}
	tableNames := map[string]string{}
	for _, tbl := range tables {
		tableNames[tbl.LogicalID] = *tbl.Input.TableName
	}
	for _, file := range slices.Sorted(maps.Keys(fixtures)) {
		own, ok := triggers[functionOf(file)]
		if !ok {
			continue
		}
		var ev struct {
			Records []json.RawMessage `json:"Records"`
		}
		if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(ev.Records) == 0 {
			t.Errorf("%s: no records", file)
		}
		for i, raw := range ev.Records {
			var rec events.DynamoDBEventRecord
			if err := json.Unmarshal(raw, &rec); err != nil {
				t.Fatalf("%s record %d: %v", file, i, err)
			}
			if want := ":table/" + tableNames[own.table] + "/stream/"; !strings.Contains(rec.EventSourceArn, want) {
				t.Errorf("%s record %d: eventSourceARN = %q, want one holding %q", file, i, rec.EventSourceArn, want)
			}
			for fn, trig := range triggers {
				if trig.table != own.table {
					continue
				}
				got, err := samtemplate.MatchFilters(trig.patterns, raw)
				if err != nil {
					t.Fatalf("%s record %d: %v", file, i, err)
				}
				if want := fn == functionOf(file) || slices.Contains(alsoDelivered[file], fn); got != want {
					t.Errorf("%s record %d: delivered to %s = %v, want %v", file, i, fn, got, want)
				}
			}
		}
	}
}

// TestAPIEvents holds the API Gateway and authorizer event files to the
// template's routes and stage, and to the devstack's API keys.
func TestAPIEvents(t *testing.T) {
	tmpl := template(t)
	stage := tmpl.ParameterDefaults()["StageName"]
	routes := map[string]bool{}
	for _, ev := range tmpl.Functions()[apiFunction].Events() {
		routes[strings.ToUpper(fmt.Sprint(ev.Properties["Method"]))+" "+fmt.Sprint(ev.Properties["Path"])] = true
	}
	pairs, err := auth.ParsePairs(auth.DefaultDevAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	tenantOf := map[string]string{}
	for _, p := range pairs {
		tenantOf[p.Key] = p.Tenant
	}
	// Sent one after another (README, "Events"), two files under one
	// tenant's key must name one route, or the second is answered 422.
	routeOfKey := map[string]string{}
	checkKey := func(file, tenant, key, route string) {
		if key == "" {
			return
		}
		k := tenant + " " + key
		if prev, ok := routeOfKey[k]; ok && prev != route {
			t.Errorf("%s: %s's key %q on %s, which another file uses on %s", file, tenant, key, route, prev)
		}
		routeOfKey[k] = route
	}
	for _, file := range slices.Sorted(maps.Keys(fixtures)) {
		raw := readFile(t, file)
		var probe struct {
			Version string `json:"version"`
		}
		decode(t, file, raw, &probe)
		switch fn := functionOf(file); {
		case fn == apiFunction && probe.Version == "2.0":
			var ev events.APIGatewayV2HTTPRequest
			decode(t, file, raw, &ev)
			route := ev.RequestContext.HTTP.Method + " " + ev.RawPath
			if !routes[route] || ev.RouteKey != route || ev.RequestContext.RouteKey != route {
				t.Errorf("%s: route %q (routeKey %q), want one of %v", file, route, ev.RouteKey, routes)
			}
			checkCaller(t, file, ev.Headers["authorization"], ev.RequestContext.Authorizer.Lambda["tenant"], tenantOf)
			checkKey(file, fmt.Sprint(ev.RequestContext.Authorizer.Lambda["tenant"]), ev.Headers["idempotency-key"], route)
			checkLength(t, file, ev.Headers["content-length"], ev.Body)
		case fn == apiFunction:
			var ev events.APIGatewayProxyRequest
			decode(t, file, raw, &ev)
			rc := ev.RequestContext
			if route := ev.HTTPMethod + " " + ev.Resource; !routes[route] || rc.HTTPMethod != ev.HTTPMethod || rc.ResourcePath != ev.Resource {
				t.Errorf("%s: route %q, want one of %v", file, route, routes)
			}
			if rc.Stage != stage || rc.Path != "/"+stage+ev.Path {
				t.Errorf("%s: stage %q, path %q; want stage %q and path /%s%s", file, rc.Stage, rc.Path, stage, stage, ev.Path)
			}
			if id := ev.PathParameters["id"]; strings.Contains(ev.Resource, "{id}") && ev.Path != strings.Replace(ev.Resource, "{id}", id, 1) {
				t.Errorf("%s: path %q, want %q with id %q", file, ev.Path, ev.Resource, id)
			}
			if rc.Authorizer["principalId"] != rc.Authorizer["tenant"] {
				t.Errorf("%s: authorizer principalId %v, want the tenant %v", file, rc.Authorizer["principalId"], rc.Authorizer["tenant"])
			}
			checkCaller(t, file, ev.Headers["Authorization"], rc.Authorizer["tenant"], tenantOf)
			checkKey(file, fmt.Sprint(rc.Authorizer["tenant"]), ev.Headers["Idempotency-Key"], ev.HTTPMethod+" "+ev.Resource)
			checkLength(t, file, ev.Headers["Content-Length"], ev.Body)
			checkMultiValue(t, file, ev.Headers, ev.MultiValueHeaders)
		case fn == authorizerFunction:
			var ev events.APIGatewayCustomAuthorizerRequestTypeRequest
			decode(t, file, raw, &ev)
			rc := ev.RequestContext
			arn := fmt.Sprintf("arn:aws:execute-api:us-east-1:%s:%s/%s/%s%s", rc.AccountID, rc.APIID, rc.Stage, ev.HTTPMethod, ev.Path)
			if ev.Type != "REQUEST" || ev.MethodArn != arn {
				t.Errorf("%s: type %q, methodArn %q; want REQUEST and %q", file, ev.Type, ev.MethodArn, arn)
			}
			if route := ev.HTTPMethod + " " + ev.Resource; !routes[route] || rc.Stage != stage {
				t.Errorf("%s: route %q on stage %q, want one of %v on %q", file, route, rc.Stage, routes, stage)
			}
			checkMultiValue(t, file, ev.Headers, ev.MultiValueHeaders)
		}
	}
}

// decode decodes an event file into v.
func decode(t *testing.T, file string, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// checkCaller checks that the Authorization header carries an API key of
// the tenant the authorizer context names.
func checkCaller(t *testing.T, file, authorization string, tenant any, tenantOf map[string]string) {
	t.Helper()
	key, ok := auth.BearerKey(authorization)
	if !ok || tenantOf[key] == "" || tenantOf[key] != tenant {
		t.Errorf("%s: Authorization %q with authorizer tenant %v, want a devstack key of that tenant", file, authorization, tenant)
	}
}

// checkLength checks a Content-Length header against the body.
func checkLength(t *testing.T, file, length, body string) {
	t.Helper()
	if length != "" && length != fmt.Sprint(len(body)) {
		t.Errorf("%s: Content-Length %s, body of %d bytes", file, length, len(body))
	}
}

// checkMultiValue checks that a REST API event's multiValueHeaders hold its
// headers, as API Gateway sends them.
func checkMultiValue(t *testing.T, file string, single map[string]string, multi map[string][]string) {
	t.Helper()
	want := map[string][]string{}
	for k, v := range single {
		want[k] = []string{v}
	}
	if diff := cmp.Diff(want, multi); diff != "" {
		t.Errorf("%s: multiValueHeaders mismatch (-headers +multiValueHeaders):\n%s", file, diff)
	}
}

// TestStreamImages holds the stream event files to the code: each record
// has the shape Lambda sends (DynamoDB Streams 1.1, NEW_AND_OLD_IMAGES,
// Keys of the item, ordered sequence numbers, the TTL identity only on a
// REMOVE); each image is exactly the item the code writes (it survives a
// round trip through the code's decoder and encoder), and an idempotency
// record's pk, fingerprint and request are derived from its origin request as
// the idempotency engine derives them.
func TestStreamImages(t *testing.T) {
	triggers := streamTriggers(t)
	for _, file := range slices.Sorted(maps.Keys(fixtures)) {
		trig, ok := triggers[functionOf(file)]
		if !ok {
			continue
		}
		f := fixtures[file]
		ev := streamEvent(t, file)
		for i, rec := range ev.Records {
			where := fmt.Sprintf("%s record %d", file, i)
			c := rec.Change
			if rec.EventSource != "aws:dynamodb" || rec.EventVersion != "1.1" || rec.AWSRegion != "us-east-1" ||
				c.StreamViewType != "NEW_AND_OLD_IMAGES" || len(rec.EventID) != 32 {
				t.Errorf("%s: eventSource %q, eventVersion %q, awsRegion %q, StreamViewType %q, eventID %q; want aws:dynamodb, 1.1, us-east-1, NEW_AND_OLD_IMAGES, 32 hex digits",
					where, rec.EventSource, rec.EventVersion, rec.AWSRegion, c.StreamViewType, rec.EventID)
			}
			if i > 0 && !sequenceBefore(ev.Records[i-1].Change.SequenceNumber, c.SequenceNumber) {
				t.Errorf("%s: SequenceNumber %s does not follow %s", where, c.SequenceNumber, ev.Records[i-1].Change.SequenceNumber)
			}
			if c.ApproximateCreationDateTime.IsZero() || c.SizeBytes <= 0 {
				t.Errorf("%s: ApproximateCreationDateTime %v, SizeBytes %d; want both set", where, c.ApproximateCreationDateTime, c.SizeBytes)
			}
			wantOld, wantNew := rec.EventName != "INSERT", rec.EventName != "REMOVE"
			if (c.OldImage != nil) != wantOld || (c.NewImage != nil) != wantNew {
				t.Errorf("%s: %s with OldImage %v, NewImage %v", where, rec.EventName, c.OldImage != nil, c.NewImage != nil)
			}
			if id := rec.UserIdentity; id != nil && (rec.EventName != "REMOVE" || !stream.NewChange(rec).ByTTL()) {
				t.Errorf("%s: userIdentity %+v on %s, want only DynamoDB's TTL identity on a REMOVE", where, *id, rec.EventName)
			}
			if rec.UserIdentity != nil && c.OldImage != nil {
				// TTL deletes only items whose TTL attribute has passed.
				var ttl int64 = math.MaxInt64
				if attr, ok := c.OldImage[trig.ttl]; ok && attr.DataType() == events.DataTypeNumber {
					ttl, _ = strconv.ParseInt(attr.Number(), 10, 64)
				}
				if c.ApproximateCreationDateTime.Unix() < ttl {
					t.Errorf("%s: a TTL removal at %d of an item whose TTL attribute %q is %d: DynamoDB deletes only expired items",
						where, c.ApproximateCreationDateTime.Unix(), trig.ttl, ttl)
				}
			}
			for _, img := range []map[string]events.DynamoDBAttributeValue{c.OldImage, c.NewImage} {
				if img == nil {
					continue
				}
				if diff := cmp.Diff(plainMap(stream.ToSDK(map[string]events.DynamoDBAttributeValue{"pk": img["pk"]})), plainMap(stream.ToSDK(c.Keys))); diff != "" {
					t.Errorf("%s: Keys mismatch (-image +Keys):\n%s", where, diff)
				}
				switch trig.table {
				case "PaymentsTable":
					checkPaymentImage(t, where, img, slices.Contains(f.poison, i))
				case "IdempotencyTable":
					checkRecordImage(t, where, img, f.origin, slices.Contains(f.legacy, i))
				case "OutboxTable":
					checkJobImage(t, where, img)
				default:
					t.Errorf("%s: no checks for images of %s", where, trig.table)
				}
			}
		}
	}
}

// checkPaymentImage checks a payment image: the item payments writes, with
// a pk made of its tenant and ID. A poison image must not decode.
func checkPaymentImage(t *testing.T, where string, img map[string]events.DynamoDBAttributeValue, poison bool) {
	t.Helper()
	item := stream.ToSDK(img)
	var p payments.Payment
	err := attributevalue.UnmarshalMap(item, &p)
	if poison {
		if err == nil {
			t.Errorf("%s: the poison image decodes as a payment, want an error", where)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if !payments.ValidID(p.ID) || p.PK != payments.PK(p.Tenant, p.ID) || !tenant.Valid(p.Tenant) {
		t.Errorf("%s: pk %q, id %q, tenant %q; want pk %q, a payment ID and a tenant", where, p.PK, p.ID, p.Tenant, payments.PK(p.Tenant, p.ID))
	}
	back, err := attributevalue.MarshalMap(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plainMap(back), plainMap(item)); diff != "" {
		t.Errorf("%s: image is not the item payments writes (-written +image):\n%s", where, diff)
	}
}

// checkRecordImage checks an idempotency record image against the request
// it was made from.
func checkRecordImage(t *testing.T, where string, img map[string]events.DynamoDBAttributeValue, o *origin, legacy bool) {
	t.Helper()
	if o == nil {
		t.Fatalf("%s: the fixture has no origin", where)
	}
	rec, err := dynamo.RecordFromStreamImage(img)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	written := dynamo.ItemFromRecord(rec)
	if legacy {
		// An External reservation as the store wrote it before External
		// reservations lost their TTL attribute: its lease deadline, in
		// seconds rounded up, plus a day.
		if rec.Status != idempotency.StatusInProgress || !rec.External {
			t.Errorf("%s: a legacy image of a %s record (External %v), want an External reservation", where, rec.Status, rec.External)
		}
		ms := rec.ExpiresAt.Add(dynamo.ExternalReservationTTL).UnixMilli()
		written[dynamo.AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt((ms+999)/1000, 10)}
	}
	if diff := cmp.Diff(plainMap(written), plainMap(stream.ToSDK(img))); diff != "" {
		t.Errorf("%s: image is not the item the store writes (-written +image):\n%s", where, diff)
	}
	canonical, err := idempotency.Canonical([]byte(o.body))
	if err != nil {
		t.Fatal(err)
	}
	if key := idempotency.NewKey(o.tenant, o.key); rec.Key != key {
		t.Errorf("%s: pk %q, want %q (tenant %q, key %q)", where, rec.Key.ID(), key.ID(), o.tenant, o.key)
	}
	if want := idempotency.Fingerprint("POST", rec.Route, canonical); rec.Fingerprint != want {
		t.Errorf("%s: fingerprint %s, want %s", where, rec.Fingerprint, want)
	}
	var wantRequest []byte
	if rec.External {
		wantRequest = canonical
	}
	if string(rec.Request) != string(wantRequest) {
		t.Errorf("%s: request %q, want %q (the canonical body of an External record only)", where, rec.Request, wantRequest)
	}
	if len(rec.LeaseToken) != 32 || rec.CreatedAt.IsZero() || rec.UpdatedAt.IsZero() {
		t.Errorf("%s: lease token %q, created %v, updated %v; want a token of 32 hex digits and both times", where, rec.LeaseToken, rec.CreatedAt, rec.UpdatedAt)
	}
}

// sequenceBefore reports whether sequence number a comes before b (both
// decimal strings).
func sequenceBefore(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// plainMap turns an item into plain Go values, for cmp.
func plainMap(item map[string]types.AttributeValue) map[string]any {
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = plain(v)
	}
	return out
}

func plain(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S:" + v.Value
	case *types.AttributeValueMemberN:
		return "N:" + v.Value
	case *types.AttributeValueMemberB:
		return "B:" + string(v.Value)
	case *types.AttributeValueMemberBOOL:
		return v.Value
	case *types.AttributeValueMemberM:
		return plainMap(v.Value)
	case *types.AttributeValueMemberNULL:
		return nil
	}
	return fmt.Sprintf("%T", v)
}

// TestSeededImagesOutliveTheFixtures checks that every item a stream file
// leaves in a table with TTL (a record's new image, which `sam local
// invoke` needs seeded first) has no TTL expiry within fifty years, or no
// TTL attribute at all, which only an item the code writes without one
// may lack (withoutTTL: an UNKNOWN record, an External reservation, an
// outbox job not sent yet): an expiry
// already in the past would have DynamoDB (Local too) delete the seeded
// item within seconds, and the invocation would quietly find nothing.
func TestSeededImagesOutliveTheFixtures(t *testing.T) {
	tables, err := template(t).Tables("once")
	if err != nil {
		t.Fatal(err)
	}
	ttl := map[string]string{}
	for _, tbl := range tables {
		ttl[tbl.LogicalID] = tbl.TTLAttribute
	}
	horizon := time.Now().AddDate(50, 0, 0)
	expiring, kept := 0, 0 // images with the TTL attribute, and without
	for file, trig := range streamFiles(t) {
		attr := ttl[trig.table]
		if attr == "" {
			continue
		}
		for i, rec := range streamEvent(t, file).Records {
			img := rec.Change.NewImage
			if img == nil {
				continue
			}
			v, ok := img[attr]
			if !ok {
				// TTL never deletes it: it must be a record the store
				// writes without the attribute.
				kept++
				if none, ok := withoutTTL[trig.table]; !ok || !none(img) {
					t.Errorf("%s record %d: new image in %s has no %s, want it (see withoutTTL for the items written without one)",
						file, i, trig.table, attr)
				}
				continue
			}
			if none, ok := withoutTTL[trig.table]; ok && none(img) {
				t.Errorf("%s record %d: new image in %s has %s, want none: the store writes this kind of item without it",
					file, i, trig.table, attr)
			}
			expiring++
			secs, err := strconv.ParseInt(v.Number(), 10, 64)
			if err != nil || time.Unix(secs, 0).Before(horizon) {
				t.Errorf("%s record %d: new image's %s = %v, want a date after %v (a TTL deletion would remove the seeded item)",
					file, i, attr, time.Unix(secs, 0).UTC(), horizon.Format(time.DateOnly))
			}
		}
	}
	if expiring+kept == 0 {
		t.Error("no stream file seeds an item in a table with TTL: the test checks nothing")
	}
	t.Logf("%d seeded image(s) with a TTL expiry checked, %d written without the attribute", expiring, kept)
}

// withoutTTL reports, for each table with TTL (by logical ID), whether an
// item is one the code writes without the TTL attribute.
var withoutTTL = map[string]func(map[string]events.DynamoDBAttributeValue) bool{
	"IdempotencyTable": recordWithoutTTL,
	// A job gets its TTL once sent (outbox.Job.ExpiresAt).
	"OutboxTable": func(img map[string]events.DynamoDBAttributeValue) bool {
		state, ok := img["state"]
		return ok && state.DataType() == events.DataTypeString && state.String() != string(outbox.Sent)
	},
}

// recordWithoutTTL reports whether img is a record the store writes
// without the TTL attribute: UNKNOWN, or an External reservation
// (IN_PROGRESS).
func recordWithoutTTL(img map[string]events.DynamoDBAttributeValue) bool {
	status, ok := img[dynamo.AttrStatus]
	if !ok || status.DataType() != events.DataTypeString {
		return false
	}
	switch idempotency.Status(status.String()) {
	case idempotency.StatusUnknown:
		return true
	case idempotency.StatusInProgress:
		ext, ok := img[dynamo.AttrExternal]
		return ok && ext.DataType() == events.DataTypeBoolean && ext.Boolean()
	}
	return false
}

// streamFiles returns the stream event files, with their function's trigger.
func streamFiles(t *testing.T) map[string]streamTrigger {
	t.Helper()
	triggers := streamTriggers(t)
	out := map[string]streamTrigger{}
	for file := range fixtures {
		if trig, ok := triggers[functionOf(file)]; ok {
			out[file] = trig
		}
	}
	return out
}

// TestReadmeSeedsTheReconcilerFixture checks the README's commands that
// prepare reconciler-unknown.json for `sam local invoke`: the provider
// charge they make must be under the record's forwarded key, for its
// request, or the reconciler finds no charge (or one of another amount).
func TestReadmeSeedsTheReconcilerFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(filepath.Dir(dynamotest.TemplatePath(t)), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rec := recordImage(t, streamEvent(t, "reconciler-unknown.json").Records[0].Change.NewImage)
	want := []string{
		"events/reconciler-unknown.json",
		"Idempotency-Key: " + rec.ForwardKey(),
		"-d '" + string(rec.Request) + "'",
	}
	for _, w := range want {
		if !strings.Contains(string(data), w) {
			t.Errorf("README.md does not hold %q: the seeding commands for reconciler-unknown.json are out of date", w)
		}
	}
}

// TestFunctionURLEvents holds the function URL event files to their
// function's AuthType: behind AWS_IAM, Lambda passes the caller's signed
// request on with its IAM identity, so the file carries both.
func TestFunctionURLEvents(t *testing.T) {
	fns := template(t).Functions()
	for _, file := range slices.Sorted(maps.Keys(fixtures)) {
		fn := functionOf(file)
		urlConfig, ok := fns[fn].Properties["FunctionUrlConfig"].(map[string]any)
		if !ok {
			continue
		}
		var ev events.LambdaFunctionURLRequest
		decode(t, file, readFile(t, file), &ev)
		checkLength(t, file, ev.Headers["content-length"], ev.Body)
		if urlConfig["AuthType"] != "AWS_IAM" {
			if ev.RequestContext.Authorizer != nil {
				t.Errorf("%s: an IAM identity behind AuthType %v", file, urlConfig["AuthType"])
			}
			continue
		}
		rc := ev.RequestContext
		if rc.Authorizer == nil || rc.Authorizer.IAM == nil {
			t.Fatalf("%s: no requestContext.authorizer.iam behind AuthType AWS_IAM", file)
		}
		iam := rc.Authorizer.IAM
		if iam.AccountID != rc.AccountID || !strings.HasPrefix(iam.UserARN, "arn:aws:sts::"+rc.AccountID+":assumed-role/") ||
			!strings.HasSuffix(iam.UserARN, "/"+strings.SplitN(iam.CallerID, ":", 2)[1]) || iam.UserID != iam.CallerID {
			t.Errorf("%s: IAM identity %+v in account %s, want one of the stack's function roles (an assumed role of the same account)", file, *iam, rc.AccountID)
		}
		sum := sha256.Sum256([]byte(ev.Body))
		date := ev.Headers["x-amz-date"]
		if len(date) != len("20060102T150405Z") {
			t.Fatalf("%s: x-amz-date %q", file, date)
		}
		scope := fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s/us-east-1/lambda/aws4_request, ", iam.AccessKey, date[:8])
		if !strings.HasPrefix(ev.Headers["authorization"], scope) || ev.Headers["x-amz-content-sha256"] != hex.EncodeToString(sum[:]) ||
			ev.Headers["x-amz-security-token"] == "" {
			t.Errorf("%s: authorization %q, x-amz-content-sha256 %q, x-amz-security-token %q; want a SigV4 signature by %s for lambda on %s, the body's SHA-256 and a session token",
				file, ev.Headers["authorization"], ev.Headers["x-amz-content-sha256"], ev.Headers["x-amz-security-token"], iam.AccessKey, date[:8])
		}
		if at := time.UnixMilli(rc.TimeEpoch).UTC().Format("20060102T150405Z"); at != date {
			t.Errorf("%s: x-amz-date %s, want the request's time %s", file, date, at)
		}
	}
}

// TestReadmeEnvJSONNamesEveryResource checks the README's env.json for
// `sam local invoke`: sam local resolves a !Ref or !GetAtt of a resource to
// its logical ID, so every variable the template sets from a resource (a
// table, a queue, the simulator's URL) must be given there, or the function
// runs against a table called RefundsTable.
func TestReadmeEnvJSONNamesEveryResource(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(filepath.Dir(dynamotest.TemplatePath(t)), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "cat > env.json <<'EOF'\n")
	raw, _, closed := strings.Cut(rest, "\nEOF\n")
	if !ok || !closed {
		t.Fatal("README.md has no `cat > env.json <<'EOF'` ... EOF block")
	}
	var envJSON struct {
		Parameters map[string]string
	}
	if err := json.Unmarshal([]byte(raw), &envJSON); err != nil {
		t.Fatalf("the README's env.json: %v\n%s", err, raw)
	}
	tmpl := template(t)
	params := tmpl.Section("Parameters")
	for _, fn := range tmpl.Functions() {
		for name, v := range fn.Environment() {
			for _, ref := range samtemplate.Refs(v) {
				if _, isParam := params[ref.Name]; isParam || strings.HasPrefix(ref.Name, "AWS::") {
					continue
				}
				if envJSON.Parameters[name] == "" {
					t.Errorf("the README's env.json does not set %s, which %s gets from %s (sam local: its logical ID)", name, fn.LogicalID, ref)
				}
			}
		}
	}
}

// TestOneSourceARNPerSource checks that the samples of one source agree:
// every record of every file from one table's stream (or one queue) names
// the same eventSourceARN, as one stack's would (a stream's label is its
// creation time, the same for every record of it, and none older).
func TestOneSourceARNPerSource(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	arns := map[string]map[string][]string{} // source -> ARN -> files
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Records []struct {
				EventSourceARN string `json:"eventSourceARN"`
				DynamoDB       struct {
					ApproximateCreationDateTime float64
				} `json:"dynamodb"`
			}
		}
		if json.Unmarshal(data, &ev) != nil {
			continue // not a batch of records
		}
		for _, r := range ev.Records {
			if r.EventSourceARN == "" {
				continue
			}
			// A stream's ARN is <table ARN>/stream/<label>; a queue's has no label.
			source, label, stream := strings.Cut(r.EventSourceARN, "/stream/")
			if stream {
				created, err := time.Parse("2006-01-02T15:04:05.000", label)
				if err != nil {
					t.Errorf("%s: stream label %q: %v", e.Name(), label, err)
				} else if at := time.Unix(int64(r.DynamoDB.ApproximateCreationDateTime), 0); at.Before(created) {
					t.Errorf("%s: a record of %v, before its stream's creation, %v", e.Name(), at.UTC(), created)
				}
			}
			if arns[source] == nil {
				arns[source] = map[string][]string{}
			}
			if files := arns[source][r.EventSourceARN]; !slices.Contains(files, e.Name()) {
				arns[source][r.EventSourceARN] = append(files, e.Name())
			}
		}
	}
	if len(arns) == 0 {
		t.Fatal("no file has records with an eventSourceARN")
	}
	for _, source := range slices.Sorted(maps.Keys(arns)) {
		if len(arns[source]) != 1 {
			t.Errorf("the samples of %s name %d ARNs: %v", source, len(arns[source]), arns[source])
		}
	}
}
