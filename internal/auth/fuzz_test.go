package auth

import (
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// FuzzBearerKey checks that BearerKey returns a key only for a value of the
// form "Bearer <key>" (the scheme in any case, blanks around), and then a
// key of printable ASCII without spaces or commas (checkKey) that is the
// whole rest of the value; and that every such key is read back from
// "Bearer <key>", never from another scheme or with something after it.
func FuzzBearerKey(f *testing.F) {
	for _, seed := range []string{
		"Bearer sk_test_acme", "bearer sk_test_acme", "BEARER   sk_test_acme", "  Bearer sk_test_acme \t",
		"Bearer", "Bearer ", "Bearer  ", "Bearer\tsk_test_acme", "Bearer sk test", "Bearer sk,test", "Bearer sk\x7f",
		"Bearer é", "Basic dXNlcjpwYXNz", "Bearersk_test_acme", "Token sk_test_acme", "", "\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, ok := BearerKey(v)
		if ok {
			if err := checkKey(key); err != nil {
				t.Fatalf("BearerKey(%q) = %q: %v", v, key, err)
			}
			trimmed := strings.TrimSpace(v)
			if len(trimmed) < len("Bearer ") || !strings.EqualFold(trimmed[:6], "Bearer") || trimmed[6] != ' ' ||
				strings.TrimLeft(trimmed[6:], " ") != key {
				t.Fatalf("BearerKey(%q) = %q, a key from a value not \"Bearer <key>\"", v, key)
			}
		} else if key != "" {
			t.Fatalf("BearerKey(%q) = %q, false; want no key", v, key)
		}
		if checkKey(v) != nil {
			return
		}
		// v as a key.
		if got, ok := BearerKey("Bearer " + v); !ok || got != v {
			t.Fatalf("BearerKey(%q) = %q, %v; want %q, true", "Bearer "+v, got, ok, v)
		}
		for _, bad := range []string{"Basic " + v, "Bearer " + v + " x", "Bearer " + v + ",x", "Bearer " + v + "\x00", v} {
			if got, ok := BearerKey(bad); ok {
				t.Fatalf("BearerKey(%q) = %q, true; want false", bad, got)
			}
		}
	})
}

// FuzzStageResource checks that StageResource, given any string, either
// refuses it or returns the ARN of a whole stage: the method ARN's
// partition, region, account, api id and stage, each non-empty and free of
// wildcards, blanks and control characters, followed by "/*/*"; an ARN it
// returns is its own stage resource.
func FuzzStageResource(f *testing.F) {
	for _, seed := range []string{
		"arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v1/payments",
		"arn:aws-cn:execute-api:cn-north-1:1:x1/s/GET/", "arn:aws:execute-api:us-east-1:1:x1/s",
		"arn:aws:execute-api:us-east-1:1:x1/s/*/*", "arn:aws:execute-api:us-east-1:1:x1", "arn:aws:execute-api:us-east-1:1:x1/",
		"arn:aws:execute-api:us-east-1:1:/s/GET/", "arn::execute-api:::x1/s/GET/", "arn:aws:execute-api:us-east-1:1:*/*/*/*",
		"arn:aws:execute-api:us-east-1:1:x1/s?/GET/", "arn:aws:execute-api:us-east-1:1:x:1/s/GET/",
		"arn:aws:lambda:us-east-1:1:function:f", "", ":::::", "arn:aws:execute-api:us-east-1:1:x1/s\x00/GET/",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, methodArn string) {
		got, err := StageResource(methodArn)
		if err != nil {
			if got != "" {
				t.Fatalf("StageResource(%q) = %q, %v; want no ARN with the error", methodArn, got, err)
			}
			return
		}
		stage, ok := strings.CutSuffix(got, "/*/*")
		if !ok || !strings.HasPrefix(methodArn, stage+"/") && methodArn != stage {
			t.Fatalf("StageResource(%q) = %q: not the method ARN's stage and /*/*", methodArn, got)
		}
		parts := strings.SplitN(stage, ":", 6)
		if len(parts) != 6 || parts[0] != "arn" || parts[2] != "execute-api" {
			t.Fatalf("StageResource(%q) = %q: not an execute-api ARN", methodArn, got)
		}
		apiID, name, ok := strings.Cut(parts[5], "/")
		if !ok || strings.Contains(name, "/") {
			t.Fatalf("StageResource(%q) = %q: not an api id and a stage", methodArn, got)
		}
		for _, p := range []string{parts[1], parts[3], parts[4], apiID, name} {
			if p == "" || strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '*' || r == '?' }) {
				t.Fatalf("StageResource(%q) = %q: part %q is empty or holds a wildcard, blank or control character", methodArn, got, p)
			}
		}
		if again, err := StageResource(got); err != nil || again != got {
			t.Fatalf("StageResource(%q) = %q, %v; want itself", got, again, err)
		}
	})
}

// FuzzHeader checks header against its rule, written out again: the value
// of the header under any spelling of its name, single- or multi-value, and
// no value ("") when two of them differ; whatever order the maps give.
func FuzzHeader(f *testing.F) {
	f.Add("Authorization", "Bearer a", "authorization", "Bearer a", "AUTHORIZATION", "Bearer a", "Bearer a", uint8(2))
	f.Add("Authorization", "Bearer a", "authorization", "Bearer b", "Authorization", "Bearer a", "Bearer a", uint8(1))
	f.Add("Authorization", "Bearer a", "X-Other", "x", "Authorization", "Bearer b", "Bearer a", uint8(2))
	f.Add("Authorization", "Bearer a", "X-Other", "x", "Authorization", "Bearer a", "Bearer b", uint8(2))
	f.Add("X-Other", "x", "Authorisation", "x", "authorization", "Bearer a", "", uint8(1))
	f.Add("X-Other", "x", "Y", "y", "Authorization", "", "", uint8(0))
	f.Add("Authorization", "", "authorization", "Bearer a", "Z", "", "", uint8(0))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, mk, mv1, mv2 string, n uint8) {
		req := events.APIGatewayCustomAuthorizerRequestTypeRequest{
			Headers:           map[string]string{k1: v1, k2: v2},
			MultiValueHeaders: map[string][]string{mk: []string{mv1, mv2}[:n%3]},
		}
		var values []string
		for k, v := range req.Headers {
			if strings.EqualFold(k, "Authorization") {
				values = append(values, v)
			}
		}
		for k, vs := range req.MultiValueHeaders {
			if strings.EqualFold(k, "Authorization") {
				values = append(values, vs...)
			}
		}
		want := ""
		if len(values) > 0 {
			want = values[0]
			for _, v := range values[1:] {
				if v != want {
					want = ""
				}
			}
		}
		for range 8 { // map order varies from call to call
			if got := header(req, "Authorization"); got != want {
				t.Fatalf("header(%q, %q) = %q, want %q", req.Headers, req.MultiValueHeaders, got, want)
			}
		}
	})
}
