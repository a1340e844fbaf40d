package provider

import (
	"fmt"
	"net/http"

	"github.com/oncehq/once/internal/config"
)

// FromConfig returns the client of the provider at cfg.ProviderURL, each
// call bounded by cfg.ProviderTimeout, or nil when cfg names none.
func FromConfig(cfg config.Config) *Client {
	if cfg.ProviderURL == "" {
		return nil
	}
	return New(cfg.ProviderURL, &http.Client{Timeout: cfg.ProviderTimeout})
}

// Require is FromConfig for function, which cannot run without a provider:
// an error naming ONCE_PROVIDER_URL when cfg.ProviderURL is not set.
func Require(cfg config.Config, function string) (*Client, error) {
	if c := FromConfig(cfg); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%s: %s is not set", function, config.EnvProviderURL)
}
