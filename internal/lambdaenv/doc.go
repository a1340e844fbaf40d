// Package lambdaenv runs a Lambda function's handler locally the way the
// Lambda service does: in execution environments, each one initialised by
// the function's own init code (a cold start) and serving one invocation at
// a time.
//
// A Function is a lambda.Handler that many goroutines may invoke at once,
// each invocation getting its own result. That is not true of the handler
// lambda.NewHandler returns: in aws-lambda-go v1.55.1 its Invoke returns the
// bytes of a pooled buffer that its deferred Close has already put back in
// the pool, so a concurrent invocation of the same handler overwrites them
// before the caller reads them. The Lambda runtime itself never sees that:
// its loop (lambda/invoke_loop.go, handleInvoke) sends the response before
// it releases the buffer, and each environment runs one invocation at a
// time. A Function does the same: an environment is busy from the event's
// arrival until its result has been copied out, and only then takes another
// invocation.
//
// Environments are created on demand and reused. A panic of the handler is
// the invocation's FunctionError, as aws-lambda-go reports it (errorType and
// errorMessage), and its environment is discarded, as the runtime exits
// after a panic: whatever it held in memory (a replay cache) is gone, and
// the next invocation runs in another environment. An error the handler
// returns is a FunctionError too, with the errorType the runtime reports for
// it (its type name: "errorString" for errors.New), but the environment is
// kept, as the runtime goes on. There is no concurrency limit and no
// throttling.
package lambdaenv
