// Package config reads the functions' configuration from the environment,
// once per cold start, and reports every problem at once.
package config
