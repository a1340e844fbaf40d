// Package app composes the functions' handlers from their configuration, so
// that the Lambda mains, the devstack and the end-to-end tests build exactly
// the same thing.
package app
