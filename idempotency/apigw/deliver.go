package apigw

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/awslabs/aws-lambda-go-api-proxy/core"

	"github.com/oncehq/once/idempotency"
)

// MaxResponse is the largest answer a Lambda function invoked synchronously
// may return, in bytes (6 MB: 6,291,456): the whole proxy response, its body
// a JSON string, or base64 when binary. API Gateway answers a larger one 502,
// as a function URL does.
const MaxResponse = 6 << 20

// ResponseHeadroom is the part of MaxResponse that Deliverable leaves to the
// header fields ResponseSize cannot see: those set outside the Middleware,
// on the ResponseWriter it writes to (a request ID, CORS fields set by a
// handler wrapping it): 16 KiB. (The Middleware asks Deliverable about the
// first answer as it sends it too, with the fields it does not store.)
const ResponseHeadroom = 16 << 10

// Deliverable is idempotency.Config's Deliverable for a Middleware whose
// handler a Lambda serves (NewLambda, once.Start): an error matching
// idempotency.ErrResponseTooLarge when resp's proxy response (ResponseSize)
// is larger than MaxResponse less ResponseHeadroom, so that the Middleware
// refuses the answer before it is stored rather than storing one that every
// replay would fail to return.
func Deliverable(resp idempotency.Response) error {
	if sizeBound(resp) <= MaxResponse-ResponseHeadroom {
		return nil // every answer of a usual size: no encoding to measure
	}
	if n := ResponseSize(resp); n > MaxResponse-ResponseHeadroom {
		return fmt.Errorf("%w: its Lambda proxy response would be %d bytes, over %d (Lambda's %d less %d for header fields set outside the middleware)",
			idempotency.ErrResponseTooLarge, n, MaxResponse-ResponseHeadroom, MaxResponse, ResponseHeadroom)
	}
	return nil
}

// sizeBound is a bound of ResponseSize(resp) that costs no encoding: every
// byte of the body, of a header field's name or value and of a cookie at
// its longest escaped in JSON (6 bytes, as \u00XX; base64 takes 4 for 3),
// each field with a few bytes of punctuation, both encodings' fixed
// fields, the fields a replay adds and a sniffed Content-Type in 1 KiB.
func sizeBound(resp idempotency.Response) int {
	const worst, perField, fixed = 6, 16, 1 << 10
	n := fixed + worst*len(resp.Body)
	for k, v := range resp.Header {
		n += worst*(len(k)+len(v)) + perField
	}
	for _, c := range resp.SetCookie {
		n += worst*(len("Set-Cookie")+len(c)) + perField
	}
	return n
}

// ResponseSize returns the size in bytes of the proxy response a Lambda
// returns for a replay of resp by the Middleware: the larger of its REST API
// encoding (payload 1.0, APIGatewayProxyResponse: every field in
// multiValueHeaders) and its HTTP API and function URL encoding (payload 2.0,
// APIGatewayV2HTTPResponse: fields in headers, Set-Cookie in cookies), as
// Lambda.Invoke encodes them. It counts the fields a replay adds
// (idempotency.ReplayedHeader, Content-Length) and the Content-Type the
// proxy sets when resp has none, and the body as a JSON string (escaped as
// encoding/json escapes it) when it is valid UTF-8, else as base64. Header
// fields set outside the Middleware are not counted: ResponseHeadroom is
// left for them.
func ResponseSize(resp idempotency.Response) int {
	v1, v2 := responseSizes(resp)
	return max(v1, v2)
}

// responseSizes returns the sizes of resp's replay in the payload 1.0 and
// the payload 2.0 encoding (see ResponseSize).
func responseSizes(resp idempotency.Response) (v1, v2 int) {
	h := http.Header{}
	resp.SetHeader(h)
	h.Set(idempotency.ReplayedHeader, "true")
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	// The proxy detects a missing Content-Type from the first 512 bytes,
	// as http.DetectContentType reads no more.
	sniff := resp.Body[:min(len(resp.Body), 512)]
	binary := !utf8.Valid(resp.Body)
	body := 0
	if binary {
		body = base64.StdEncoding.EncodedLen(len(resp.Body)) // no byte of base64 needs escaping
	} else {
		body = quotedLen(resp.Body) - len(`""`)
	}

	w1 := core.NewProxyResponseWriter()
	fill(w1, h, resp.Status, sniff)
	r1, _ := w1.GetProxyResponse() // the status is set: never an error
	r1.Body, r1.IsBase64Encoded = "", binary
	w2 := core.NewProxyResponseWriterV2()
	fill(w2, h, resp.Status, sniff)
	r2, _ := w2.GetProxyResponse()
	r2.Body, r2.IsBase64Encoded = "", binary
	return encodedLen(r1) + body, encodedLen(r2) + body
}

// fill writes to w what a replay writes to the proxy's writer (see
// serveProxy), but for the body, of which it writes only sniff.
func fill(w http.ResponseWriter, h http.Header, status int, sniff []byte) {
	for k, v := range h {
		w.Header()[k] = slices.Clone(v)
	}
	sw := &statusWriter{ResponseWriter: w}
	sw.WriteHeader(status)
	_, _ = sw.Write(sniff)
}

// encodedLen is the length of v's JSON, as Lambda.Invoke encodes it.
func encodedLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0 // unreachable: proxy responses always encode
	}
	return len(b)
}

// quotedLen returns the length of the JSON string encoding/json makes of
// the valid UTF-8 s, quotes included: HTML-escaped ('<', '>' and '&' as
// \u003c), control characters as \n, \t, \r, \b, \f or \u00XX, U+2028 and
// U+2029 as \u2028 and \u2029.
func quotedLen(s []byte) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += len(`\ufffd`)
		case r == '\u2028' || r == '\u2029':
			n += len(`\u2028`)
		default:
			n += size
		}
		i += size
	}
	return n
}
