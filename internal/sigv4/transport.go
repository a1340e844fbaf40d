package sigv4

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// ServiceLambda is the signing name of Lambda, function URLs included.
const ServiceLambda = "lambda"

// Transport is an http.RoundTripper that signs each request for Service in
// Region with the credentials of Credentials before Base sends it.
type Transport struct {
	// Base sends the signed requests (http.DefaultTransport when nil).
	Base http.RoundTripper
	// Credentials provides the signing credentials, on every request (wrap
	// it in aws.NewCredentialsCache to cache them). Required.
	Credentials aws.CredentialsProvider
	// Region and Service scope the signature. Required.
	Region, Service string
	// Now returns the signing time (time.Now when nil).
	Now func() time.Time
}

// NewTransport returns a Transport signing for service in region with
// creds, sending through base.
func NewTransport(base http.RoundTripper, creds aws.CredentialsProvider, region, service string) *Transport {
	return &Transport{Base: base, Credentials: creds, Region: region, Service: service}
}

// RoundTrip signs a clone of req and sends it. It closes req's body, as the
// RoundTripper contract asks, also when it fails before sending.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("sigv4: read the body: %w", err)
		}
		body = b
	}
	if t.Credentials == nil || t.Region == "" || t.Service == "" {
		return nil, fmt.Errorf("sigv4: Transport needs Credentials, Region and Service")
	}
	creds, err := t.Credentials.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("sigv4: credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])

	signed := req.Clone(req.Context())
	signed.Header.Set("X-Amz-Content-Sha256", hash)
	signed.ContentLength = int64(len(body))
	if req.Body != nil {
		signed.Body = io.NopCloser(bytes.NewReader(body))
		signed.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	if err := v4.NewSigner().SignHTTP(req.Context(), creds, signed, hash, t.Service, t.Region, now()); err != nil {
		return nil, fmt.Errorf("sigv4: sign: %w", err)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(signed)
}
