// Package functionurl emulates, for the devstack, what a Lambda function URL
// does before its function runs when its AuthType is AWS_IAM: it refuses,
// with the status, x-amzn-ErrorType and JSON body Lambda answers, any request
// whose Signature Version 4 does not verify, and the function is not invoked.
//
// IAM verifies a request as AWS does (the "Authorization" header form only;
// presigned query strings are not emulated): an Authorization header in the
// AWS4-HMAC-SHA256 form, the caller's access key (the one set of credentials
// the devstack gives its functions), a credential scope of the
// X-Amz-Date's day, the URL's region and the service "lambda", an
// X-Amz-Date within 5 minutes of the clock, the session token of the
// credentials, an X-Amz-Content-Sha256 (when sent) equal to the SHA-256 of
// the body received, and a signature equal to the one aws-sdk-go-v2's signer
// (aws/signer/v4) computes for the request received, its body hashed
// afresh, with the same signed headers and time. Every refusal is logged
// with its reason (never the body, the query or the signature).
//
// Local emulation only: no function links this package
// (internal/deploytest).
package functionurl
