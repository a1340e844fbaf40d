package audit_test

import (
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/oncehq/once/internal/audit"
	"github.com/oncehq/once/internal/dynamoclient"
)

// TestAuditorOptions: the auditor's client waits for a slow 1 MB Scan
// page (at least 10 s an attempt, at least 5 attempts, backing off up to
// seconds under throttling) rather than failing the run as the api's
// options would (2 s, 3 attempts, 200 ms); and a page it starts with
// audit.Margin left before its deadline ends, failed or not, within
// dynamoclient.CallBound, leaving a second at least to emit what the run
// counted. (In this package, not dynamoclient's: its tests need not
// import the auditor and, through it, the app.)
func TestAuditorOptions(t *testing.T) {
	opts := audit.ClientOptions()
	opts.Endpoint = "http://127.0.0.1:1"
	cfg, err := dynamoclient.Config(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.HTTPClient.(*awshttp.BuildableClient).GetTimeout(); got < 10*time.Second {
		t.Errorf("auditor HTTP client timeout = %v, want at least 10s (a 1 MB Scan page under load)", got)
	}
	if got := cfg.Retryer().MaxAttempts(); got < 5 {
		t.Errorf("auditor MaxAttempts() = %d, want at least 5", got)
	}
	if opts.MaxBackoff < time.Second {
		t.Errorf("auditor MaxBackoff = %v, want at least 1s (throttling)", opts.MaxBackoff)
	}
	if bound := dynamoclient.CallBound(opts); bound+time.Second > audit.Margin {
		t.Errorf("CallBound(auditor options) = %v: a page started with Margin (%v) left may not end a second before the deadline", bound, audit.Margin)
	}
}
