package provider_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/provider"
)

// TestProviderAuth checks what the functions send the provider: nothing
// more than the request with ONCE_PROVIDER_AUTH unset, a SigV4 signature
// for Lambda in the function's region, with its own credentials, with
// aws_iam (the simulator's function URL, AuthType AWS_IAM).
func TestProviderAuth(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, `{"error":{"code":"unavailable"}}`, http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	for _, tt := range []struct {
		auth, wantPrefix string
	}{
		{"", ""},
		{"none", ""},
		{"aws_iam", "AWS4-HMAC-SHA256 Credential=local/"},
	} {
		t.Run("auth "+tt.auth, func(t *testing.T) {
			env := map[string]string{
				config.EnvProviderURL: srv.URL, config.EnvProviderAuth: tt.auth,
				config.EnvDynamoDBEndpoint: "http://127.0.0.1:1", config.EnvRegion: "eu-west-1",
			}
			cfg, err := config.FromEnv(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			awsCfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: cfg.DynamoDBEndpoint, Region: cfg.Region})
			if err != nil {
				t.Fatal(err)
			}
			o := dynamoclient.New(awsCfg, cfg.DynamoDBEndpoint).Options()
			p, err := provider.Require(cfg, o.Credentials, o.Region, "test")
			if err != nil {
				t.Fatal(err)
			}
			got = nil
			_, _ = p.Charge(t.Context(), "once_key", provider.ChargeRequest{Amount: 1, Currency: "eur", Source: "tok_visa", Customer: "c"})
			_, _ = p.Lookup(t.Context(), "once_key")
			if len(got) != 2 {
				t.Fatalf("the provider got %d calls, want 2", len(got))
			}
			for _, a := range got {
				switch {
				case tt.wantPrefix == "" && a != "":
					t.Errorf("Authorization = %q, want none", a)
				case tt.wantPrefix != "" && (!strings.HasPrefix(a, tt.wantPrefix) || !strings.Contains(a, "/eu-west-1/lambda/aws4_request")):
					t.Errorf("Authorization = %q, want SigV4 for lambda in eu-west-1 with the function's credentials", a)
				}
			}
		})
	}
}

func TestFromConfig(t *testing.T) {
	if c, err := provider.FromConfig(config.Config{}, nil, ""); c != nil || err != nil {
		t.Errorf("FromConfig(no URL) = %v, %v; want nil, nil", c, err)
	}
	cfg := config.Config{ProviderURL: "https://provider.example.com", ProviderAuth: config.ProviderAuthIAM}
	if _, err := provider.FromConfig(cfg, nil, "eu-west-1"); err == nil || !strings.Contains(err.Error(), "ONCE_PROVIDER_AUTH") {
		t.Errorf("FromConfig(aws_iam without credentials) error = %v, want one naming ONCE_PROVIDER_AUTH", err)
	}
	if _, err := provider.Require(config.Config{}, nil, "", "worker"); err == nil || !strings.Contains(err.Error(), "worker: ONCE_PROVIDER_URL") {
		t.Errorf("Require(no URL) error = %v, want one naming the function and ONCE_PROVIDER_URL", err)
	}
}
