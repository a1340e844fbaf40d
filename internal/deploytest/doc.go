// Package deploytest holds the deployment files to the code: template.yaml,
// samconfig.toml and localstack/. Its tests parse the template with
// internal/samtemplate and check, without AWS, that
//
//   - every functions/<name> folder has exactly one AWS::Serverless::Function
//     (<Name>Function, built by `make build-<Name>Function`) and vice versa,
//     and that each builds a static, stripped linux/arm64 and linux/amd64
//     bootstrap with -tags lambda.norpc;
//   - the tables' keys, TTL attributes and streams are the ones the code
//     uses, and round-trip through samtemplate.Tables into DynamoDB Local;
//   - each stream mapping's FilterCriteria is the design's, and lets through
//     exactly the records its handler acts on (Lambda's filtering rules as
//     implemented by samtemplate.MatchPattern);
//   - each function's role grants only exact actions on its own tables,
//     streams and queue, and every DynamoDB operation its code can reach;
//   - every environment variable a function's code reads is set, and the
//     fault injection switch never is;
//   - the API's routes are exactly the ones internal/httpapi serves;
//   - localstack/ and samconfig.toml agree with the template.
//
// The code checks scan the Go source reachable from each functions/<name>
// (go list for the packages, go/parser for the code; see scan_test.go).
package deploytest
