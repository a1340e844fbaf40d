package dynamoclient_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/aws/smithy-go/logging"

	"github.com/oncehq/once/internal/dynamoclient"
)

// TestSDKLogsAreStructured: what the SDK logs goes to slog's default logger
// as JSON lines at its level, never as the SDK's unstructured lines.
func TestSDKLogsAreStructured(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	cfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Logf(logging.Warn, "failed to discard remaining HTTP response body, %v", "read: connection reset")
	cfg.Logger.Logf(logging.Debug, "request %d", 7)
	var got []map[string]any
	for line := range bytes.Lines(buf.Bytes()) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		delete(m, "time")
		got = append(got, m)
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "aws sdk", "detail": "failed to discard remaining HTTP response body, read: connection reset"},
		{"level": "DEBUG", "msg": "aws sdk", "detail": "request 7"},
	}
	if len(got) != len(want) {
		t.Fatalf("lines = %v, want %v", got, want)
	}
	for i := range want {
		for k, v := range want[i] {
			if got[i][k] != v {
				t.Errorf("line %d %s = %v, want %v", i, k, got[i][k], v)
			}
		}
	}
}
