// Package dynamoclient builds the DynamoDB and DynamoDB Streams clients that
// every function, the devstack and the tests share: one place for the endpoint
// override, bounded retries and timeouts.
package dynamoclient
