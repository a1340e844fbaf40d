package functionurl

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/oncehq/once/internal/gateway"
)

// Function URL auth types (FunctionUrlConfig.AuthType).
const (
	AuthTypeIAM  = "AWS_IAM"
	AuthTypeNone = "NONE"
)

// Service is the signing name of Lambda, function URLs included.
const Service = "lambda"

// MaxClockSkew is how far an X-Amz-Date may be from the clock: AWS refuses a
// request that does not reach it within 5 minutes of its timestamp.
const MaxClockSkew = 5 * time.Minute

// MaxPayload is the largest request body a function URL takes (Lambda's 6 MB
// limit on a synchronous invocation's request).
const MaxPayload = 6 * 1024 * 1024

const (
	algorithm  = "AWS4-HMAC-SHA256"
	terminator = "aws4_request"
	amzDate    = "20060102T150405Z"
	scopeDate  = "20060102"
)

// IAM is an http.Handler in front of Next as a function URL whose AuthType
// is AWS_IAM is in front of its function: a request whose SigV4 signature
// does not verify against Credentials in Region gets Lambda's 403 and Next
// never sees it.
type IAM struct {
	// Next is the function. Required.
	Next http.Handler
	// Credentials are the only ones IAM lets in: those of the devstack's
	// functions (their DynamoDB client's). Required.
	Credentials aws.CredentialsProvider
	// Region is the function URL's region. Required.
	Region string
	// Function names the function in the log lines.
	Function string
	// Logger receives one line per refusal (nil discards).
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// refusal is Lambda's answer to a request it does not let through, and why.
type refusal struct {
	status  int
	errType string // x-amzn-ErrorType
	field   string // the body's one key: Lambda spells it "Message" or "message"
	message string
	reason  string // for the log
}

// Refusals of IAM, as Lambda answers them.
var (
	// errForbidden answers a request with no signature: an anonymous caller
	// IAM does not allow (aws-lambda-developer-guide issue 494 shows the
	// answer of an unauthorized call to a function URL).
	errForbidden = refusal{status: http.StatusForbidden, errType: "AccessDeniedException", field: "Message",
		message: "Forbidden. For troubleshooting Function URL authorization issues, see: https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html"}
	// errMismatch answers a signature that is not the one computed.
	errMismatch = refusal{status: http.StatusForbidden, errType: "InvalidSignatureException", field: "message",
		message: "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."}
	// errUnknownKey answers an access key or session token IAM does not know.
	errUnknownKey = refusal{status: http.StatusForbidden, errType: "UnrecognizedClientException", field: "message",
		message: "The security token included in the request is invalid."}
)

// invalid is an InvalidSignatureException with message, logged as reason.
func invalid(reason, message string) refusal {
	return refusal{status: http.StatusForbidden, errType: "InvalidSignatureException", field: "message", message: message, reason: reason}
}

func (r refusal) because(reason string) refusal {
	r.reason = reason
	return r
}

// ServeHTTP verifies r's signature and passes r on to Next, body intact, or
// answers Lambda's refusal.
func (a *IAM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxPayload))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			a.refuse(w, r, refusal{status: http.StatusRequestEntityTooLarge, errType: "RequestTooLargeException", field: "Message",
				message: fmt.Sprintf("Request must be smaller than %d bytes for the InvokeFunction operation", MaxPayload), reason: "body too large"})
			return
		}
		a.refuse(w, r, errMismatch.because("body unreadable: "+err.Error()))
		return
	}
	if ref, ok := a.verify(r, body); !ok {
		a.refuse(w, r, ref)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	a.Next.ServeHTTP(w, r)
}

// verify checks r, whose body is body, as Lambda checks the signature of a
// call to an AWS_IAM function URL.
func (a *IAM) verify(r *http.Request, body []byte) (refusal, bool) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return errForbidden.because("no Authorization header"), false
	}
	sig, ref, ok := parseAuthorization(auth, r.Header.Get("X-Amz-Date"))
	if !ok {
		return ref, false
	}
	creds, err := a.Credentials.Retrieve(r.Context())
	if err != nil {
		return errForbidden.because("the devstack's credentials: " + err.Error()), false
	}
	if sig.accessKey != creds.AccessKeyID {
		return errUnknownKey.because("unknown access key"), false
	}
	if ref, ok := a.checkScope(sig); !ok {
		return ref, false
	}
	if ref, ok := a.checkTime(sig.date); !ok {
		return ref, false
	}
	if creds.SessionToken != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Amz-Security-Token")), []byte(creds.SessionToken)) != 1 {
		return errUnknownKey.because("wrong or missing X-Amz-Security-Token"), false
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	if sent := r.Header.Get("X-Amz-Content-Sha256"); sent != "" && sent != hash {
		return errMismatch.because("X-Amz-Content-Sha256 is not the SHA-256 of the body received"), false
	}
	want, err := resign(r, sig, creds, hash, a.Region)
	if err != nil {
		return errMismatch.because("sign again: " + err.Error()), false
	}
	if !slices.Equal(want.signedHeaders, sig.signedHeaders) {
		return errMismatch.because("SignedHeaders lists headers the request lacks or the signer never signs"), false
	}
	if subtle.ConstantTimeCompare([]byte(want.signature), []byte(sig.signature)) != 1 {
		return errMismatch.because("signature mismatch: the method, path, query, a signed header or the body differs from what was signed, or another secret signed it"), false
	}
	return refusal{}, true
}

// signature is a parsed Authorization header and its X-Amz-Date.
type signature struct {
	accessKey, day, region, service, terminator string
	signedHeaders                               []string
	signature                                   string
	date                                        time.Time
	rawDate                                     string
}

// parseAuthorization parses "AWS4-HMAC-SHA256 Credential=AK/day/region/
// service/aws4_request, SignedHeaders=a;b, Signature=hex" and the X-Amz-Date
// xDate, answering as AWS does what is incomplete.
func parseAuthorization(auth, xDate string) (signature, refusal, bool) {
	incomplete := func(missing []string) (signature, refusal, bool) {
		return signature{}, refusal{status: http.StatusForbidden, errType: "IncompleteSignatureException", field: "message",
			message: strings.Join(missing, " "), reason: "incomplete Authorization: " + strings.Join(missing, " ")}, false
	}
	alg, params := authParams(auth)
	if alg != algorithm {
		return incomplete([]string{"Authorization header requires the " + algorithm + " algorithm."})
	}
	var missing []string
	for _, p := range []string{"Credential", "Signature", "SignedHeaders"} {
		if params[p] == "" {
			missing = append(missing, "Authorization header requires '"+p+"' parameter.")
		}
	}
	date, err := time.Parse(amzDate, xDate)
	if err != nil {
		missing = append(missing, "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
	}
	scope := strings.Split(params["Credential"], "/")
	if len(missing) == 0 && len(scope) != 5 {
		missing = append(missing, "Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term.")
	}
	if len(missing) > 0 {
		return incomplete(missing)
	}
	return signature{
		accessKey: scope[0], day: scope[1], region: scope[2], service: scope[3], terminator: scope[4],
		signedHeaders: strings.Split(params["SignedHeaders"], ";"),
		signature:     params["Signature"],
		date:          date, rawDate: xDate,
	}, refusal{}, true
}

// checkScope checks the credential scope: the X-Amz-Date's day, the URL's
// region, Lambda, aws4_request.
func (a *IAM) checkScope(s signature) (refusal, bool) {
	switch {
	case s.day != s.date.Format(scopeDate):
		return invalid("credential scope day is not X-Amz-Date's", fmt.Sprintf(
			"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from '%s'.",
			s.day, s.date.Format(scopeDate), s.rawDate)), false
	case s.region != a.Region:
		return invalid("credential scope region "+s.region+", the URL's is "+a.Region,
			"Credential should be scoped to a valid region, not '"+s.region+"'. "), false
	case s.service != Service:
		return invalid("credential scope service "+s.service+", want "+Service,
			"Credential should be scoped to correct service: '"+Service+"'. "), false
	case s.terminator != terminator:
		return invalid("credential scope terminator "+s.terminator,
			"Credential should be scoped with a valid terminator: '"+terminator+"', not '"+s.terminator+"'. "), false
	}
	return refusal{}, true
}

// checkTime checks that the X-Amz-Date date is within MaxClockSkew of now.
func (a *IAM) checkTime(date time.Time) (refusal, bool) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	t := now().UTC()
	switch {
	case date.Before(t.Add(-MaxClockSkew)):
		return invalid("X-Amz-Date more than 5 minutes old", fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 5 min.)",
			date.Format(amzDate), t.Add(-MaxClockSkew).Format(amzDate), t.Format(amzDate))), false
	case date.After(t.Add(MaxClockSkew)):
		return invalid("X-Amz-Date more than 5 minutes ahead", fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 5 min.)",
			date.Format(amzDate), t.Add(MaxClockSkew).Format(amzDate), t.Format(amzDate))), false
	}
	return refusal{}, true
}

// resign returns the signature (and its SignedHeaders) that aws-sdk-go-v2's
// signer computes for r as received: its method, its request target on its
// Host, the headers the caller signed (and only those), the body's hash, the
// caller's time, with creds for region and Lambda.
func resign(r *http.Request, sig signature, creds aws.Credentials, bodyHash, region string) (signature, error) {
	u, err := url.Parse("http://" + r.Host + r.RequestURI)
	if err != nil {
		return signature{}, err
	}
	again := &http.Request{Method: r.Method, URL: u, Host: r.Host, Header: http.Header{}}
	for _, h := range sig.signedHeaders {
		switch h {
		case "host":
		case "content-length":
			// The signer signs the length it is given, when not zero.
			again.ContentLength = r.ContentLength
		default:
			if vs := r.Header.Values(h); len(vs) > 0 {
				again.Header[http.CanonicalHeaderKey(h)] = slices.Clone(vs)
			}
		}
	}
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, again, bodyHash, Service, region, sig.date); err != nil {
		return signature{}, err
	}
	_, params := authParams(again.Header.Get("Authorization"))
	return signature{signedHeaders: strings.Split(params["SignedHeaders"], ";"), signature: params["Signature"]}, nil
}

// authParams splits an Authorization header into its scheme and its
// comma-separated key=value parameters.
func authParams(auth string) (scheme string, params map[string]string) {
	scheme, rest, _ := strings.Cut(auth, " ")
	params = map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		params[k] = v
	}
	return scheme, params
}

// refuse answers ref as Lambda does and logs why.
func (a *IAM) refuse(w http.ResponseWriter, r *http.Request, ref refusal) {
	id := gateway.NewRequestID()
	if a.Logger != nil {
		a.Logger.Warn("function url: request refused",
			slog.String("function", a.Function),
			slog.String("request_id", id),
			slog.Int("status", ref.status),
			slog.String("error_type", ref.errType),
			slog.String("reason", ref.reason),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path))
	}
	body, _ := json.Marshal(map[string]string{ref.field: ref.message})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Amzn-Errortype", ref.errType)
	h.Set("X-Amzn-Requestid", id)
	w.WriteHeader(ref.status)
	_, _ = w.Write(body)
}
