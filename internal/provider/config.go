package provider

import (
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/sigv4"
)

// FromConfig returns the client of the provider at cfg.ProviderURL, each
// call bounded by cfg.ProviderTimeout, or nil when cfg names none. With
// cfg.ProviderAuth config.ProviderAuthIAM every call is signed (SigV4,
// service lambda) with creds in region: the function's own role, as its
// DynamoDB client has them (dynamodb.Client.Options), which IAM lets call
// the simulator's function URL; it is an error for them to be missing then.
func FromConfig(cfg config.Config, creds aws.CredentialsProvider, region string) (*Client, error) {
	if cfg.ProviderURL == "" {
		return nil, nil
	}
	hc := &http.Client{Timeout: cfg.ProviderTimeout}
	if cfg.ProviderAuth == config.ProviderAuthIAM {
		if creds == nil || region == "" {
			return nil, fmt.Errorf("provider: %s=%s needs AWS credentials and a region", config.EnvProviderAuth, cfg.ProviderAuth)
		}
		hc.Transport = sigv4.NewTransport(nil, creds, region, sigv4.ServiceLambda)
	}
	return New(cfg.ProviderURL, hc), nil
}

// Require is FromConfig for function, which cannot run without a provider:
// an error naming ONCE_PROVIDER_URL when cfg.ProviderURL is not set.
func Require(cfg config.Config, creds aws.CredentialsProvider, region, function string) (*Client, error) {
	c, err := FromConfig(cfg, creds, region)
	if err != nil || c != nil {
		return c, err
	}
	return nil, fmt.Errorf("%s: %s is not set", function, config.EnvProviderURL)
}
