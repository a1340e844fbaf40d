// Package readme tests the code README.md shows users: the "Use once in your
// own Lambda" main.go, built exactly as written in a fresh module that
// requires nothing but github.com/oncehq/once, run as a Lambda function
// against DynamoDB Local with the tables of the README's template entries;
// its recovery functions' main.go, built beside it; its External
// (refunds.go) and multi-step (orders.go) snippets, built and vetted as
// packages of a fresh module; and its DynamoDB Local create-table commands,
// held to the store's attribute names. (The README's curl examples are run
// by internal/devstack.)
package readme
