// Package readme tests the code README.md shows users: the "Use once in your
// own Lambda" main.go, built exactly as written in a fresh module that
// requires nothing but github.com/oncehq/once, run as a Lambda function
// against DynamoDB Local with the tables of the README's template entries;
// and its recovery functions' main.go, built beside it. (The README's curl examples are run by internal/devstack.)
package readme
