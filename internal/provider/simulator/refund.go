package simulator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	kindRefund     = "refund"
	refundIDPrefix = "prre_"
	// MaxListedRefunds bounds the refunds GET /v1/refunds?charge= lists.
	MaxListedRefunds = 100
	maxRefundBody    = maxCharacterBytes*maxMetadataKeys*(maxMetadataKey+maxMetadataValue) + 4<<10
)

// refundBehaviours is what a refund does, by the source of its charge.
var refundBehaviours = map[string]behaviour{
	TokenRefundUnavailable: unavailable,
	TokenRefundTimeout:     hold,
	TokenRefundSlow:        slow,
}

// Reasons a refund may give.
var refundReasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// refundRequest is the body of POST /v1/refunds. Amount is nil when the
// request leaves it out: everything left.
type refundRequest struct {
	Charge   string            `json:"charge"`
	Amount   *int64            `json:"amount,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// refund is a recorded refund, with the answer to replay.
type refund struct {
	Key            string            `dynamodbav:"-"`
	PK             string            `dynamodbav:"pk"`
	Kind           string            `dynamodbav:"kind"`
	ID             string            `dynamodbav:"id"`
	Status         string            `dynamodbav:"status"`
	Charge         string            `dynamodbav:"charge"`
	Amount         int64             `dynamodbav:"amount"`
	Currency       string            `dynamodbav:"currency"`
	Reason         string            `dynamodbav:"reason,omitempty"`
	Metadata       map[string]string `dynamodbav:"metadata,omitempty"`
	Params         string            `dynamodbav:"params"`
	ResponseStatus int               `dynamodbav:"response_status"`
	ResponseBody   []byte            `dynamodbav:"response_body"`
	Created        int64             `dynamodbav:"created"`
}

// refundObject is the JSON form of a refund.
type refundObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Status         string            `json:"status"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Charge         string            `json:"charge"`
	Reason         string            `json:"reason,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Created        int64             `json:"created"`
	IdempotencyKey string            `json:"idempotency_key"`
}

func (r refund) object() refundObject {
	return refundObject{
		ID: r.ID, Object: "refund", Status: r.Status, Amount: r.Amount, Currency: r.Currency, Charge: r.Charge,
		Reason: r.Reason, Metadata: r.Metadata, Created: r.Created, IdempotencyKey: r.Key,
	}
}

// refusal is a refund the charge does not allow (400, nothing recorded).
type refusal struct {
	code, message string
}

func (e *refusal) Error() string { return e.code + ": " + e.message }

// createRefund serves POST /v1/refunds: the first request with a key refunds
// the charge (all that is left of it when the request names no amount) and
// records the refund with its answer, in the same transaction that moves the
// charge's refunded total, conditioned on that total as read: concurrent
// refunds of one charge never add up to more than it.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	key, err := parseKey("Idempotency-Key", r.Header.Values("Idempotency-Key"))
	if err != nil {
		s.invalid(w, err)
		return
	}
	req, err := parseRefundRequest(w, r)
	if err != nil {
		s.invalid(w, err)
		return
	}
	log := s.log.With("key", shortKey(key), "charge", req.Charge)
	// The write goes on when the client hangs up; see writeTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), writeTimeout)
	defer cancel()
	params := refundParams(req)

	existing, found, err := s.getRefund(ctx, key)
	switch {
	case err != nil:
		s.unknown(w, log, "refund", err)
		return
	case found:
		s.replayAnswer(w, log.With("refund", existing.ID), "refund", existing.Params == params, existing.ResponseStatus, existing.ResponseBody)
		return
	}
	c, found, err := s.getByID(ctx, req.Charge)
	switch {
	case err != nil:
		s.unknown(w, log, "refund", err)
		return
	case !found:
		writeJSON(w, http.StatusBadRequest, encode(errorBody{Error: apiError{
			Type: "invalid_request_error", Code: "resource_missing", Param: "charge", Message: "No such charge.",
		}}))
		return
	}
	b := refundBehaviours[c.Source]
	if b == unavailable {
		log.Info("simulator: unavailable", "outcome", "unavailable")
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, encode(errorBody{Error: apiError{
			Type: "api_error", Code: "provider_unavailable",
			Message: "The provider is unavailable; nothing was refunded. Retry later.",
		}}))
		return
	}

	ref, created, err := s.recordRefund(ctx, key, req, params, c)
	var no *refusal
	switch {
	case errors.As(err, &no):
		log.Info("simulator: refund refused", "outcome", "refused", "code", no.code)
		writeJSON(w, http.StatusBadRequest, encode(errorBody{Error: apiError{
			Type: "invalid_request_error", Code: no.code, Param: "amount", Message: no.message,
		}}))
		return
	case err != nil:
		s.unknown(w, log, "refund", err)
		return
	case !created:
		s.replayAnswer(w, log.With("refund", ref.ID), "refund", ref.Params == params, ref.ResponseStatus, ref.ResponseBody)
		return
	}
	log.Info("simulator: refund", "outcome", "created", "refund", ref.ID, "amount", ref.Amount)
	switch b {
	case hold:
		_ = sleep(r.Context(), s.holdFor)
	case slow:
		_ = sleep(r.Context(), s.slowDelay)
	}
	writeJSON(w, ref.ResponseStatus, ref.ResponseBody)
}

// listRefunds serves GET /v1/refunds?idempotency_key=K (the refund made
// with key K, or 404 resource_missing) and GET /v1/refunds?charge=ID (the
// charge's refunds, oldest first, at most MaxListedRefunds).
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case q.Has("idempotency_key") && !q.Has("charge"):
		key, err := parseKey("idempotency_key", q["idempotency_key"])
		if err != nil {
			s.invalid(w, err)
			return
		}
		ref, found, err := s.getRefund(r.Context(), key)
		s.foundRefund(w, ref, found, err)
	case q.Has("charge") && !q.Has("idempotency_key") && len(q["charge"]) == 1:
		c, found, err := s.getByID(r.Context(), q.Get("charge"))
		if err != nil || !found {
			s.found(w, c, found, err)
			return
		}
		refunds, err := s.chargeRefunds(r.Context(), c)
		if err != nil {
			s.found(w, c, false, err)
			return
		}
		list := struct {
			Object  string         `json:"object"`
			Data    []refundObject `json:"data"`
			HasMore bool           `json:"has_more"`
		}{Object: "list", Data: []refundObject{}, HasMore: len(refunds) > MaxListedRefunds}
		for _, ref := range refunds[:min(len(refunds), MaxListedRefunds)] {
			list.Data = append(list.Data, ref.object())
		}
		writeJSON(w, http.StatusOK, encode(list))
	default:
		s.invalid(w, invalid("", "give either one idempotency_key or one charge"))
	}
}

func (s *Server) foundRefund(w http.ResponseWriter, ref refund, found bool, err error) {
	switch {
	case err != nil:
		s.found(w, charge{}, false, err)
	case !found:
		writeJSON(w, http.StatusNotFound, encode(errorBody{Error: apiError{
			Type: "invalid_request_error", Code: "resource_missing", Message: "No such refund.",
		}}))
	default:
		writeJSON(w, http.StatusOK, encode(ref.object()))
	}
}

// parseRefundRequest reads and validates a refund request, with the limits
// of a charge request's reason and metadata.
func parseRefundRequest(w http.ResponseWriter, r *http.Request) (refundRequest, error) {
	var req refundRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRefundBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, invalid("", "the body is larger than %d bytes", maxRefundBody)
		}
		var wrongType *json.UnmarshalTypeError
		if errors.As(err, &wrongType) && wrongType.Field != "" {
			return req, invalid(wrongType.Field, "must be of type %s", wrongType.Type)
		}
		return req, invalid("", "the body is not a valid refund request: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, invalid("", "the body holds more than one JSON value")
	}
	if n := len(req.Charge); n < 1 || n > MaxKeyLength {
		return req, invalid("charge", "must be a charge id")
	}
	if req.Amount != nil && (*req.Amount <= 0 || *req.Amount > maxAmount) {
		return req, invalid("amount", "must be an integer from 1 to %d", maxAmount)
	}
	if req.Reason != "" && !slices.Contains(refundReasons, req.Reason) {
		return req, invalid("reason", "must be one of %v", refundReasons)
	}
	if len(req.Metadata) > maxMetadataKeys {
		return req, invalid("metadata", "at most %d keys", maxMetadataKeys)
	}
	for k, v := range req.Metadata {
		if n := utf8.RuneCountInString(k); n < 1 || n > maxMetadataKey || utf8.RuneCountInString(v) > maxMetadataValue {
			return req, invalid("metadata", "keys must be 1 to %d characters and values at most %d", maxMetadataKey, maxMetadataValue)
		}
	}
	return req, nil
}

// refundParams identifies the parameters of a refund request: a second
// request with the same key must carry the same hash.
func refundParams(req refundRequest) string { return hashJSON(req) }

// recordRefund records the refund that req makes of c under key, unless a
// refund already exists for key: a transaction that puts the refund
// (attribute_not_exists) and moves c's refunded total from the value read,
// so that a concurrent refund of c makes it fail and read c again. It returns
// the refund now recorded for key and whether this call created it, a
// *refusal when c cannot be refunded so, or an error after which the write
// may or may not have happened (except errBusy).
func (s *Server) recordRefund(ctx context.Context, key string, req refundRequest, params string, c charge) (refund, bool, error) {
	for attempt := 1; ; attempt++ {
		left := c.Amount - c.Refunded
		amount := left
		if req.Amount != nil {
			amount = *req.Amount
		}
		switch {
		case c.Status != StatusSucceeded:
			return refund{}, false, &refusal{"charge_not_refundable", "Only a succeeded charge can be refunded."}
		case left == 0:
			return refund{}, false, &refusal{"charge_already_refunded", "The charge has already been refunded in full."}
		case amount > left:
			return refund{}, false, &refusal{"amount_too_large", "The amount is greater than what is left to refund (" + strconv.FormatInt(left, 10) + ")."}
		}
		ref := newRefund(key, req, params, c, amount, s.now())
		err := s.putRefund(ctx, ref, c)
		if err == nil {
			return ref, true, nil
		}
		var canceled *types.TransactionCanceledException
		if !errors.As(err, &canceled) {
			return refund{}, false, err
		}
		// The key is taken, or the charge's total moved under us.
		existing, found, err := s.getRefund(ctx, key)
		if err != nil {
			return refund{}, false, err
		}
		if found {
			return existing, false, nil
		}
		if attempt >= recordAttempts {
			return refund{}, false, errBusy
		}
		if err := sleep(ctx, time.Duration(5+rand.IntN(20*attempt))*time.Millisecond); err != nil {
			return refund{}, false, err
		}
		if c, found, err = s.get(ctx, c.Key); err != nil || !found {
			return refund{}, false, fmt.Errorf("simulator: read charge %s again: found %v: %w", c.ID, found, err)
		}
	}
}

func newRefund(key string, req refundRequest, params string, c charge, amount int64, now time.Time) refund {
	ref := refund{
		Key: key, PK: refundKeyPrefix + key, Kind: kindRefund, ID: newID(refundIDPrefix),
		Status: StatusSucceeded, Charge: c.ID, Amount: amount, Currency: c.Currency,
		Reason: req.Reason, Metadata: req.Metadata, Params: params, ResponseStatus: http.StatusCreated,
		Created: now.Unix(),
	}
	ref.ResponseBody = encode(ref.object())
	return ref
}

func (s *Server) putRefund(ctx context.Context, ref refund, c charge) error {
	item, err := attributevalue.MarshalMap(ref)
	if err != nil {
		return fmt.Errorf("simulator: marshal refund: %w", err)
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: &s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
			{Update: &types.Update{
				TableName:           &s.table,
				Key:                 map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: c.Key}},
				UpdateExpression:    aws.String("SET refunded = :total ADD refund_keys :key"),
				ConditionExpression: aws.String("kind = :charge AND (refunded = :read OR (attribute_not_exists(refunded) AND :read = :zero))"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":total":  &types.AttributeValueMemberN{Value: strconv.FormatInt(c.Refunded+ref.Amount, 10)},
					":read":   &types.AttributeValueMemberN{Value: strconv.FormatInt(c.Refunded, 10)},
					":zero":   &types.AttributeValueMemberN{Value: "0"},
					":key":    &types.AttributeValueMemberSS{Value: []string{ref.Key}},
					":charge": &types.AttributeValueMemberS{Value: kindCharge},
				},
			}},
		},
	})
	return err
}

// getRefund reads the refund recorded under key, consistently.
func (s *Server) getRefund(ctx context.Context, key string) (refund, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: refundKeyPrefix + key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return refund{}, false, fmt.Errorf("simulator: get refund: %w", err)
	}
	if out.Item == nil {
		return refund{}, false, nil
	}
	var ref refund
	if err := attributevalue.UnmarshalMap(out.Item, &ref); err != nil {
		return refund{}, false, fmt.Errorf("simulator: unmarshal refund: %w", err)
	}
	if ref.Kind != kindRefund {
		return refund{}, false, nil
	}
	ref.Key = key
	return ref, true, nil
}

// chargeRefunds reads c's refunds, oldest first.
func (s *Server) chargeRefunds(ctx context.Context, c charge) ([]refund, error) {
	var out []refund
	for _, key := range c.RefundKeys {
		ref, found, err := s.getRefund(ctx, key)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("simulator: charge %s lists a refund that does not exist", c.ID)
		}
		out = append(out, ref)
	}
	slices.SortFunc(out, func(a, b refund) int {
		return cmp.Or(cmp.Compare(a.Created, b.Created), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}
