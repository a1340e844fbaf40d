// Package ddblocal starts and stops AWS's DynamoDB Local, a Java program, from
// the copy that `scripts/dynamodb-local.sh fetch` caches in
// .cache/dynamodb-local, so the devstack runs against the real engine with no
// AWS account and no Docker.
//
// Start launches the JVM in memory on a loopback port, in its own process
// group (a Ctrl-C at the terminal reaches the devstack, which then stops the
// database after its own shutdown) and, on Linux, with a parent-death signal
// so it never outlives the process that started it. Start returns once the
// server answers HTTP; Server.Stop sends SIGTERM, then SIGKILL after a bounded
// wait, and reaps the process.
package ddblocal
