package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Failure is a record the Poller discarded after its retries: what a Lambda
// event source mapping would send to its on-failure destination, with the
// record itself rather than only its coordinates.
type Failure struct {
	// Poller is PollerOptions.Name.
	Poller    string `json:"poller"`
	Table     string `json:"table"`
	StreamARN string `json:"streamArn"`
	ShardID   string `json:"shardId"`
	// Reason is the last failure: the handler's error, or "batch item
	// failure".
	Reason string `json:"reason"`
	// Attempts counts the failed invocations charged to the record's batch:
	// 1 + MaxRetryAttempts (0 for a record that could not be converted).
	// Bisecting a batch is not charged.
	Attempts int                        `json:"attempts"`
	Time     time.Time                  `json:"time"`
	Record   events.DynamoDBEventRecord `json:"record"`
}

// deadLetter sends recs to the dead letter and moves the checkpoint past
// them.
func (s *shardReader) deadLetter(ctx context.Context, recs []events.DynamoDBEventRecord, reason string, attempts int) {
	opts := &s.p.opts
	for _, rec := range recs {
		f := Failure{
			Poller:    opts.Name,
			Table:     opts.Table,
			StreamARN: s.streamARN,
			ShardID:   s.shardID,
			Reason:    reason,
			Attempts:  attempts,
			Time:      time.Now().UTC(),
			Record:    rec,
		}
		s.log.Error("stream record discarded to the dead letter",
			"sequence_number", rec.Change.SequenceNumber, "event_id", rec.EventID, "event_name", rec.EventName,
			"attempts", attempts, "reason", reason)
		if opts.DeadLetter != nil {
			opts.DeadLetter(ctx, f)
		}
		if opts.DeadLetterFile != "" {
			if err := s.p.appendDeadLetter(f); err != nil {
				s.log.Error("write dead letter file", "err", err, "file", opts.DeadLetterFile,
					"sequence_number", rec.Change.SequenceNumber)
			}
		}
		s.checkpoint = rec.Change.SequenceNumber
	}
}

// appendDeadLetter appends f to DeadLetterFile as one JSON line.
func (p *Poller) appendDeadLetter(f Failure) error {
	line, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("stream: encode dead letter: %w", err)
	}
	line = append(line, '\n')
	p.dlq.Lock()
	defer p.dlq.Unlock()
	name := p.opts.DeadLetterFile
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("stream: dead letter directory: %w", err)
	}
	file, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("stream: open dead letter file: %w", err)
	}
	if _, err := file.Write(line); err != nil {
		file.Close()
		return fmt.Errorf("stream: write dead letter file: %w", err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("stream: close dead letter file: %w", err)
	}
	return nil
}

// ReadDeadLetters reads a dead-letter file written by a Poller.
func ReadDeadLetters(name string) ([]Failure, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("stream: read dead letters: %w", err)
	}
	var out []Failure
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var f Failure
		if err := dec.Decode(&f); err != nil {
			return out, fmt.Errorf("stream: decode dead letter %d of %s: %w", len(out)+1, name, err)
		}
		out = append(out, f)
	}
	return out, nil
}
