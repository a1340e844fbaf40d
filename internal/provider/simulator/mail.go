package simulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Addresses that make the mail API fail, as the source tokens make charges
// fail.
const (
	// UnavailableDomain: every message to an address at this domain is
	// answered 503 and not sent (a mail outage that does not end).
	UnavailableDomain = "unavailable.example"
)

// failFirst matches a local part "<name>+fail<N>": the first N messages to
// that address are answered 503 and not sent, the later ones are sent (a
// mail outage that ends).
var failFirst = regexp.MustCompile(`\+fail([1-9][0-9]?)@`)

// Limits of a message.
const (
	maxAddress  = 254
	maxSubject  = 998 // RFC 5322's line length
	maxText     = 64 << 10
	maxOrder    = 64
	maxMailBody = 2*maxText + 8<<10 // the text JSON-escaped, and the rest
	mailboxPK   = "mailbox "        // + address: never an idempotency key, which holds no space
	kindMailbox = "mailbox"
)

// messageRequest is the body of POST /v1/messages.
type messageRequest struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	Order   string `json:"order"`
}

// message is a sent message, as stored and as answered.
type message struct {
	ID      string `json:"id" dynamodbav:"id"`
	Object  string `json:"object" dynamodbav:"-"`
	To      string `json:"to" dynamodbav:"to"`
	Subject string `json:"subject" dynamodbav:"subject"`
	Text    string `json:"text" dynamodbav:"text"`
	Order   string `json:"order" dynamodbav:"order"`
	Created int64  `json:"created" dynamodbav:"created"`
}

// mailbox is the item holding every message sent to one address.
type mailbox struct {
	PK       string    `dynamodbav:"pk"`
	Kind     string    `dynamodbav:"kind"`
	Attempts int       `dynamodbav:"attempts"`
	Messages []message `dynamodbav:"messages"`
}

func parseMessage(w http.ResponseWriter, r *http.Request) (messageRequest, error) {
	var m messageRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMailBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, invalid("", "the body is not a valid message: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return m, invalid("", "the body holds more than one JSON value")
	}
	switch {
	case m.To == "" || len(m.To) > maxAddress || strings.Count(m.To, "@") != 1 || strings.ContainsAny(m.To, " \t\r\n"):
		return m, invalid("to", "must be one e-mail address of at most %d characters", maxAddress)
	case m.Subject == "" || utf8.RuneCountInString(m.Subject) > maxSubject || strings.ContainsAny(m.Subject, "\r\n"):
		return m, invalid("subject", "must be one line of 1 to %d characters", maxSubject)
	case len(m.Text) > maxText:
		return m, invalid("text", "must be at most %d bytes", maxText)
	case len(m.Order) > maxOrder:
		return m, invalid("order", "must be at most %d characters", maxOrder)
	}
	return m, nil
}

// send serves POST /v1/messages: every request that is answered 202 sends
// one message, whatever was sent before (no idempotency key).
func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	m, err := parseMessage(w, r)
	if err != nil {
		s.invalid(w, err)
		return
	}
	log := s.log.With("to", shortKey(m.To), "order", m.Order)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), writeTimeout)
	defer cancel()
	_, domain, _ := strings.Cut(m.To, "@")
	fail := strings.EqualFold(domain, UnavailableDomain)
	if sub := failFirst.FindStringSubmatch(m.To); sub != nil && !fail {
		n, _ := strconv.Atoi(sub[1])
		attempts, err := s.countAttempt(ctx, m.To)
		if err != nil {
			s.mailError(w, log, err)
			return
		}
		fail = attempts <= n
	}
	if fail {
		log.Info("simulator: mail unavailable", "outcome", "unavailable")
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, encode(errorBody{Error: apiError{
			Type: "api_error", Code: "mail_unavailable", Message: "The mail service is unavailable; nothing was sent. Retry later.",
		}}))
		return
	}
	msg := message{ID: "msg_" + newToken(), Object: "message", To: m.To, Subject: m.Subject, Text: m.Text,
		Order: m.Order, Created: s.now().Unix()}
	if err := s.deliver(ctx, msg); err != nil {
		s.mailError(w, log, err)
		return
	}
	log.Info("simulator: mail", "outcome", "sent", "message", msg.ID)
	writeJSON(w, http.StatusAccepted, encode(msg))
}

// messages serves GET /v1/messages?to=<address>: what was sent to it.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	to := r.URL.Query().Get("to")
	if to == "" || len(to) > maxAddress {
		s.invalid(w, invalid("to", "an address is required"))
		return
	}
	out, err := s.db.GetItem(r.Context(), &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            mailboxKey(to),
		ConsistentRead: aws.Bool(true),
	})
	var box mailbox
	if err == nil {
		err = attributevalue.UnmarshalMap(out.Item, &box)
	}
	if err != nil {
		s.mailError(w, s.log, err)
		return
	}
	list := struct {
		Object string    `json:"object"`
		Data   []message `json:"data"`
	}{Object: "list", Data: []message{}}
	for _, m := range box.Messages {
		m.Object = "message"
		list.Data = append(list.Data, m)
	}
	writeJSON(w, http.StatusOK, encode(list))
}

// countAttempt counts one more message to the address, returning the count.
// The write is idempotent (the SDK may retry it after it landed): it adds
// the request's token to the set of counted ones, under the condition that
// it is not there yet.
func (s *Server) countAttempt(ctx context.Context, to string) (int, error) {
	token := newToken()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.table,
		Key:                                 mailboxKey(to),
		UpdateExpression:                    aws.String("SET #kind = :kind ADD #attempts :one, #counted :token"),
		ConditionExpression:                 aws.String("attribute_not_exists(#counted) OR NOT contains(#counted, :id)"),
		ExpressionAttributeNames:            map[string]string{"#kind": "kind", "#attempts": "attempts", "#counted": "counted"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":kind": str(kindMailbox), ":one": &types.AttributeValueMemberN{Value: "1"}, ":token": &types.AttributeValueMemberSS{Value: []string{token}}, ":id": str(token)},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	item := map[string]types.AttributeValue(nil)
	var landed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &landed):
		item = landed.Item // an earlier attempt of this call counted it
	case err != nil:
		return 0, fmt.Errorf("simulator: count mail attempt: %w", err)
	default:
		item = out.Attributes
	}
	var box mailbox
	if err := attributevalue.UnmarshalMap(item, &box); err != nil {
		return 0, fmt.Errorf("simulator: count mail attempt: %w", err)
	}
	return box.Attempts, nil
}

// deliver appends msg to its address's mailbox. The write is idempotent
// (the SDK may retry it after it landed): it adds the message's ID to the
// set of delivered ones, under the condition that it is not there yet.
func (s *Server) deliver(ctx context.Context, msg message) error {
	item, err := attributevalue.Marshal([]message{msg})
	if err != nil {
		return fmt.Errorf("simulator: marshal message: %w", err)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.table,
		Key:                      mailboxKey(msg.To),
		UpdateExpression:         aws.String("SET #kind = :kind, #messages = list_append(if_not_exists(#messages, :empty), :msg) ADD #ids :idset"),
		ConditionExpression:      aws.String("attribute_not_exists(#ids) OR NOT contains(#ids, :id)"),
		ExpressionAttributeNames: map[string]string{"#kind": "kind", "#messages": "messages", "#ids": "ids"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":kind":  str(kindMailbox),
			":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
			":msg":   item,
			":idset": &types.AttributeValueMemberSS{Value: []string{msg.ID}},
			":id":    str(msg.ID),
		},
	})
	var landed *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &landed) {
		return fmt.Errorf("simulator: deliver message: %w", err)
	}
	return nil
}

func mailboxKey(to string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": str(mailboxPK + to)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// mailError answers 500 after a DynamoDB error: the message may or may not
// have been sent.
func (s *Server) mailError(w http.ResponseWriter, log *slog.Logger, err error) {
	log.Error("simulator: mail store error", "outcome", "error", "err", err)
	writeJSON(w, http.StatusInternalServerError, encode(errorBody{Error: apiError{
		Type: "api_error", Code: "internal_error", Message: "An error occurred; the message may or may not have been sent.",
	}}))
}
