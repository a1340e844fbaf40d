// Package lambdamain is what every functions/<name>/main.go does around its
// run function: JSON logs only.
//
// A Lambda function's stdout and stderr go to CloudWatch Logs, where the
// template asks for JSON (LoggingConfig.LogFormat: JSON). The functions log
// through log/slog, but libraries they link print through the standard log
// package: aws-lambda-go reports a failed invocation with log.Printf and a
// runtime that cannot start with log.Fatalf, aws-lambda-go-api-proxy logs
// what it cannot convert with log.Println. Run sends all of those through a
// JSON slog handler, and reports an error that keeps the function from
// starting (a bad configuration: Runtime.ExitError) as one JSON line too.
// The package imports nothing but the standard library, so that every
// function may link it.
package lambdamain
