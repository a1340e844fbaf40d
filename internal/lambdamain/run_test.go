package lambdamain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"strings"
	"testing"

	"github.com/oncehq/once/internal/lambdamain"
)

func TestSetupMakesTheLogPackageWriteJSON(t *testing.T) {
	before := slog.Default()
	t.Cleanup(func() {
		slog.SetDefault(before)
		slog.SetLogLoggerLevel(slog.LevelInfo)
	})
	var out bytes.Buffer
	lambdamain.Setup(&out)
	log.Printf("Could not convert request %s:%s to http.Request\n", "GET", "/v1/payments/x\n{\"level\":\"INFO\",\"forged\":true}")
	log.Println("second")

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("log package wrote %d lines, want 2:\n%s", len(lines), out.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("line %q is not JSON: %v", lines[0], err)
	}
	if first["level"] != "ERROR" || !strings.Contains(first["msg"].(string), "x\n{") || first["forged"] != nil {
		t.Errorf("line = %v, want level ERROR and the newline kept inside msg", first)
	}
}

func TestFail(t *testing.T) {
	var out bytes.Buffer
	lambdamain.Fail(&out, errors.Join(errors.New(`config: ONCE_LEASE="-1s": must be positive`), errors.New("config: LOG_LEVEL")))
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("Fail wrote %q, want one JSON line (%v)", out.String(), err)
	}
	if line["level"] != "ERROR" || line["msg"] != "function cannot start" || !strings.Contains(line["error"].(string), "ONCE_LEASE") {
		t.Errorf("line = %v", line)
	}
}
