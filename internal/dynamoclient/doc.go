// Package dynamoclient builds the AWS configuration and the DynamoDB client
// that every function, the devstack and the tests share: one place for the
// endpoint override, bounded retries, timeouts and the structured SDK logger.
// The DynamoDB Streams client, which only the local stream pollers and the
// tests use, is built by the subpackage streamsclient on the same
// configuration, so that no function links the Streams SDK.
package dynamoclient
