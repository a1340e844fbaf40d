package devstack

import (
	"context"
	"net/http"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/functionurl"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/sigv4"
)

// startProvider serves the provider simulator (which is the mail API too)
// on 127.0.0.1:PROVIDER_PORT, unless ONCE_PROVIDER_URL names a provider
// already; ONCE_MAIL_URL, unless set, is the simulator, or that provider.
//
// The simulator is served as its function URL serves it in AWS: when the
// template's ProviderFunction has AuthType AWS_IAM, every call must be
// signed (SigV4, service lambda) with the credentials the devstack gives its
// functions, in its region (package functionurl), and the functions that
// call the simulator sign, as the template has them do there
// (ONCE_PROVIDER_AUTH and, when the simulator is the mail API,
// ONCE_MAIL_AUTH become aws_iam).
func (s *Stack) startProvider(context.Context) error {
	if s.cfg.ProviderURL != "" {
		if s.cfg.MailURL == "" {
			s.cfg.MailURL = s.cfg.ProviderURL
		}
		s.log.Info("devstack: using the provider at ONCE_PROVIDER_URL", "url", s.cfg.ProviderURL, "mail_url", s.cfg.MailURL)
		return nil
	}
	authType, err := functionURLAuthType(s.tmpl, providerFunction)
	if err != nil {
		return err
	}
	var h http.Handler = simulator.Handler(s.cfg, s.client, app.Options{Logger: s.log.With("function", "provider")})
	if s.opts.WrapProvider != nil {
		h = s.opts.WrapProvider(h)
	}
	if authType == functionurl.AuthTypeIAM {
		o := s.client.Options()
		h = &functionurl.IAM{
			Next:        h,
			Credentials: o.Credentials,
			Region:      o.Region,
			Function:    "provider",
			Logger:      s.log.With("component", "function-url"),
		}
	}
	srv, url, err := s.serve("provider", s.providerPort, h, nil)
	if err != nil {
		return err
	}
	s.onStop("provider simulator", func(context.Context) error {
		// tok_timeout holds its answer for long; do not wait for it.
		return srv.Close()
	})
	s.cfg.ProviderURL = url
	if s.cfg.MailURL == "" {
		s.cfg.MailURL = url
	}
	s.providerAuth = authType
	if authType == functionurl.AuthTypeIAM {
		s.cfg.ProviderAuth = config.ProviderAuthIAM
		if s.cfg.MailURL == url {
			s.cfg.MailAuth = config.ProviderAuthIAM
		}
	}
	s.log.Info("devstack: provider simulator ready", "url", s.cfg.ProviderURL, "mail_url", s.cfg.MailURL,
		"table", s.cfg.Table("ProviderTable"), "auth_type", authType,
		"provider_auth", s.cfg.ProviderAuth, "mail_auth", s.cfg.MailAuth)
	return nil
}

// ProviderClient returns an HTTP client for the provider simulator the stack
// serves, signing as the stack's functions sign (their credentials and
// region, the service lambda) when its function URL is AWS_IAM, as any
// caller IAM lets in must; a plain client otherwise.
func (s *Stack) ProviderClient() *http.Client {
	if s.providerAuth != functionurl.AuthTypeIAM {
		return &http.Client{}
	}
	o := s.client.Options()
	return &http.Client{Transport: sigv4.NewTransport(nil, o.Credentials, o.Region, sigv4.ServiceLambda)}
}
