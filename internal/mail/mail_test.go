package mail_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oncehq/once/internal/mail"
)

// TestSend checks Send's outcome for each kind of answer of a mail API.
func TestSend(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantID  string
		want    error // matched with errors.Is; nil for success
		status  bool  // a *mail.StatusError, not ErrNotSent nor ErrOutcomeUnknown
	}{
		{"sent", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id": "msg_1", "object": "message"}`))
		}, "msg_1", nil, false},
		{"unavailable", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, "", mail.ErrNotSent, false},
		{"throttled", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) }, "", mail.ErrNotSent, false},
		{"refused", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error": {"code": "invalid_request"}}`))
		}, "", nil, true},
		{"server error", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }, "", mail.ErrOutcomeUnknown, false},
		{"accepted without a message", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }, "", mail.ErrOutcomeUnknown, false},
		{"no answer in time", func(w http.ResponseWriter, r *http.Request) { time.Sleep(300 * time.Millisecond) }, "", mail.ErrOutcomeUnknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" || r.Header.Get("Content-Type") != "application/json" {
					t.Errorf("request %s %s (%s), want POST /v1/messages as JSON", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
				}
				tt.handler(w, r)
			}))
			defer srv.Close()
			c := mail.New(srv.URL+"/", &http.Client{Timeout: 100 * time.Millisecond})
			id, err := c.Send(t.Context(), mail.Message{To: "ada@example.com", Subject: "s", Text: "t", Order: "ord_1"})
			var se *mail.StatusError
			switch {
			case tt.want == nil && !tt.status && (err != nil || id != tt.wantID):
				t.Errorf("Send = %q, %v; want %q", id, err, tt.wantID)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Errorf("Send = %q, %v; want an error wrapping %v", id, err, tt.want)
			case tt.status && (!errors.As(err, &se) || errors.Is(err, mail.ErrNotSent) || errors.Is(err, mail.ErrOutcomeUnknown)):
				t.Errorf("Send = %q, %v; want a *StatusError alone", id, err)
			}
		})
	}
}

// TestSendUnreachable: nothing listens, so nothing was sent.
func TestSendUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = mail.New("http://"+addr, nil).Send(t.Context(), mail.Message{To: "a@example.com"})
	if !errors.Is(err, mail.ErrNotSent) {
		t.Errorf("Send = %v, want ErrNotSent", err)
	}
}
