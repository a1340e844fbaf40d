// Package sigv4 signs outgoing HTTP requests with AWS Signature Version 4,
// as a Lambda function URL whose AuthType is AWS_IAM requires of its callers
// (https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html): the
// api, worker and reconciler functions call the provider simulator's
// function URL through a Transport, signed for the service "lambda" with
// their own role's credentials, which IAM grants lambda:InvokeFunctionUrl
// (and, for function URLs created since October 2025,
// lambda:InvokeFunction) on the simulator function only.
//
// The signing itself is aws-sdk-go-v2's (aws/signer/v4); the Transport
// hashes the body, which it reads into memory, adds X-Amz-Content-Sha256 and
// signs a clone of each request, leaving the caller's untouched.
package sigv4
