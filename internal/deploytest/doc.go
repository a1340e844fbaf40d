// Package deploytest holds the deployment files to the code: template.yaml,
// samconfig.toml and localstack/. Its tests parse the template with
// internal/samtemplate and check, without AWS, that
//
//   - every functions/<name> folder has exactly one AWS::Serverless::Function
//     (<Name>Function, built by `make build-<Name>Function`) and vice versa,
//     and that each builds a static, stripped linux/arm64 and linux/amd64
//     bootstrap with -tags lambda.norpc;
//   - every table follows the rules that let the rest be derived (its name,
//     key, SSE, PITR, retention, a stream exactly when a function reads it),
//     its key and TTL attributes are the code's constants, and it
//     round-trips through samtemplate.Tables into DynamoDB Local;
//   - each stream mapping's FilterCriteria is the design's, and lets through
//     exactly the records its handler acts on (Lambda's filtering rules as
//     implemented by samtemplate.MatchPattern);
//   - every environment variable a function's code reads is set, the
//     template sets none it does not read, each is set from the source its
//     name derives (a table's variable from !Ref of that table), and the
//     fault injection switch never is;
//   - each function's role grants only exact actions its code can call (or
//     Lambda calls for it), on the tables, streams, queues and function URLs
//     its environment and its event sources name, and every DynamoDB and SQS
//     operation its code can reach;
//   - the API's routes are exactly the ones internal/api serves;
//   - each function links only what it runs (go list -deps, as deployed):
//     no local emulation, test support or DynamoDB Streams client in any
//     function nor in the root package, no HTTP layer in a background
//     function, the authorizer's package only in the authorizer;
//   - localstack/ and samconfig.toml agree with the template.
//
// No test keeps a list of tables, variables or grants: adding an endpoint
// with a table of its own takes its code and its template entries. The code
// checks scan the Go source reachable from each functions/<name> (go list
// for the packages, go/parser for the code; see scan_test.go), including
// the tables it names with config.Config.Table.
package deploytest
