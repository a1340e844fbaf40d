package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
)

// goErrorReply is how Go's HTTP server answers a request it refuses before
// any handler runs (net/http's conn.serve: a malformed request line or
// header, a header value with a NUL or DEL, a bad Host, headers too large, an
// unsupported transfer encoding): a status line, exactly these two headers,
// and a plain-text reason. It writes the reply to the connection in one
// call. No answer of the Emulator can look like it: they all carry an
// x-amzn-RequestId header.
var goErrorReply = regexp.MustCompile(`^HTTP/1\.1 ([1-5][0-9][0-9]) [^\r\n]*\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n([^\r\n]*)$`)

// Listener returns ln with its connections' replies from Go's HTTP server
// itself (see goErrorReply) turned into API Gateway's shape: the same status,
// a JSON body {"message": "<status text>"}, x-amzn-ErrorType and
// x-amzn-RequestId, as the Emulator answers; each is logged to logger (nil
// discards). Serve the Emulator on it, so that no client ever gets a
// text/plain answer.
func Listener(ln net.Listener, logger *slog.Logger) net.Listener {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &listener{Listener: ln, log: logger}
}

type listener struct {
	net.Listener
	log *slog.Logger
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, log: l.log}, nil
}

// conn rewrites Go's error replies written to it.
type conn struct {
	net.Conn
	log *slog.Logger
}

// goErrorHeaders are the headers of every reply goErrorReply matches: a
// write without them (every answer of the Emulator) goes out without the
// regular expression being run on it.
var goErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

func (c *conn) Write(p []byte) (int, error) {
	if !bytes.Contains(p, goErrorHeaders) {
		return c.Conn.Write(p)
	}
	m := goErrorReply.FindSubmatch(p)
	if m == nil {
		return c.Conn.Write(p)
	}
	status, _ := strconv.Atoi(string(m[1]))
	id := NewRequestID()
	body, _ := json.Marshal(map[string]string{"message": http.StatusText(status)})
	errType := "BadRequestException"
	if status >= 500 {
		errType = "InternalServerErrorException"
	}
	reply := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"Connection: close\r\nX-Amzn-Errortype: %s\r\nX-Amzn-Requestid: %s\r\n\r\n%s",
		status, http.StatusText(status), len(body), errType, id, body)
	c.log.Info("gateway: request refused before routing",
		slog.String("request_id", id),
		slog.Int("status", status),
		slog.String("reason", string(m[2])),
		slog.String("remote", c.RemoteAddr().String()))
	if _, err := c.Conn.Write([]byte(reply)); err != nil {
		return 0, err
	}
	return len(p), nil
}
