// Package dynamotest gives tests a DynamoDB Local client and per-test tables
// built from template.yaml, so tests run against the same definitions a
// deployment uses.
//
// Tests find DynamoDB Local through ONCE_TEST_DYNAMODB_ENDPOINT. Without it
// they skip, unless ONCE_REQUIRE_DYNAMODB=1 (set by `make test`), in which
// case they fail: CI can never pass without the real engine.
package dynamotest
