package dynamoclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"testing"

	"github.com/aws/smithy-go/logging"
)

// TestSDKLogsWithoutADefault: in a program that has not set slog's default
// logger (a library user's), the SDK's lines are JSON on stderr, never text
// through package log as slog's built-in default would write them.
func TestSDKLogsWithoutADefault(t *testing.T) {
	if got := fmt.Sprintf("%T", slog.Default().Handler()); got != "*slog.defaultHandler" {
		t.Fatalf("slog's default handler at the start of the test is %s, want the built-in one (is it set by another test?)", got)
	}
	var out, text bytes.Buffer
	prevOut, prevLog := stderr, log.Writer()
	stderr = &out
	log.SetOutput(&text)
	t.Cleanup(func() {
		stderr = prevOut
		log.SetOutput(prevLog)
	})
	sdkLog(logging.Warn, "failed to discard remaining HTTP response body, %v", "read: connection reset")
	var got struct{ Level, Msg, Detail string }
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stderr = %q, want one JSON line: %v", out.String(), err)
	}
	if got.Level != "WARN" || got.Msg != "aws sdk" || got.Detail != "failed to discard remaining HTTP response body, read: connection reset" {
		t.Errorf("stderr line = %+v, want WARN aws sdk with the detail", got)
	}
	if text.Len() != 0 {
		t.Errorf("package log got %q, want nothing", text.String())
	}
}
