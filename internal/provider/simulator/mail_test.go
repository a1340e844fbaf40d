package simulator_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/oncehq/once/internal/provider/simulator"
)

func (e *env) postMessage(t *testing.T, body string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/v1/messages", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(t, nil, req)
}

func (e *env) mailbox(t *testing.T, to string) []map[string]any {
	t.Helper()
	a := e.get(t, "/v1/messages?to="+url.QueryEscape(to))
	if a.status != http.StatusOK {
		t.Fatalf("GET /v1/messages = %d %s, want 200", a.status, a.body)
	}
	var list struct {
		Object string
		Data   []map[string]any
	}
	if err := json.Unmarshal(a.body, &list); err != nil || list.Object != "list" {
		t.Fatalf("GET /v1/messages = %s (%v), want a list", a.body, err)
	}
	return list.Data
}

// TestMail: every accepted POST sends one message (the API is not
// idempotent); the address chooses an outage; bad messages are refused.
func TestMail(t *testing.T) {
	e := newEnv(t)
	const msg = `{"to": "ada@example.com", "subject": "Your receipt", "text": "Thanks.", "order": "ord_1"}`
	var ids []any
	for range 2 {
		a := e.postMessage(t, msg)
		if a.status != http.StatusAccepted || a.json(t)["object"] != "message" {
			t.Fatalf("POST = %d %s, want 202 and the message", a.status, a.body)
		}
		ids = append(ids, a.json(t)["id"])
	}
	box := e.mailbox(t, "ada@example.com")
	if len(box) != 2 || box[0]["id"] != ids[0] || box[1]["id"] != ids[1] || ids[0] == ids[1] || box[0]["order"] != "ord_1" {
		t.Errorf("mailbox = %v, want the two messages %v in order", box, ids)
	}
	if got := e.mailbox(t, "nobody@example.com"); len(got) != 0 {
		t.Errorf("empty mailbox = %v, want none", got)
	}

	tests := []struct {
		name   string
		body   string
		status []int // one per POST
		sent   int
		to     string
	}{
		{"outage that ends", `{"to": "bea+fail2@example.com", "subject": "s", "text": "t", "order": "o"}`, []int{503, 503, 202, 202}, 2, "bea+fail2@example.com"},
		{"outage that does not end", `{"to": "cy@` + simulator.UnavailableDomain + `", "subject": "s", "text": "t", "order": "o"}`, []int{503, 503}, 0, "cy@" + simulator.UnavailableDomain},
		{"no address", `{"subject": "s", "text": "t", "order": "o"}`, []int{400}, 0, ""},
		{"two addresses", `{"to": "a@x.com,b@x.com", "subject": "s", "text": "t", "order": "o"}`, []int{400}, 0, ""},
		{"unknown field", `{"to": "a@x.com", "subject": "s", "text": "t", "order": "o", "cc": "b@x.com"}`, []int{400}, 0, ""},
		{"two lines of subject", `{"to": "a@x.com", "subject": "s\nBcc: b@x.com", "text": "t", "order": "o"}`, []int{400}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.status {
				a := e.postMessage(t, tt.body)
				if a.status != want {
					t.Errorf("POST %d = %d %s, want %d", i+1, a.status, a.body, want)
				}
				if want == http.StatusServiceUnavailable && a.header.Get("Retry-After") == "" {
					t.Errorf("POST %d: 503 without Retry-After", i+1)
				}
			}
			if tt.to != "" {
				if n := len(e.mailbox(t, tt.to)); n != tt.sent {
					t.Errorf("messages sent = %d, want %d", n, tt.sent)
				}
			}
		})
	}
}
