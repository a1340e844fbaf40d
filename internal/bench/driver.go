package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// RoleDriver, as EnvRole, makes the bench's command the front door's
// driver (ServeDriver) instead of measuring: the bench runs its HTTP
// clients so, in a process of their own, to measure the devstack's
// process's CPU time without theirs.
const RoleDriver = "driver"

// The driver's protocol lines on its standard output: driverReady once it
// has read its driveSpec, driverDone as soon as its clients are done, before
// its driven (one JSON line).
const (
	driverReady = "ready"
	driverGo    = "go"
	driverDone  = "done"
)

// driverSlack bounds a driver beyond its driving time: its start, the
// requests in flight at the end (each bounded by the HTTP client's
// timeout), its answer.
const driverSlack = 2 * time.Minute

// driveSpec is what the front door's driver is to do: Clients clients
// sending POSTs to URL for Duration, each one after the other. With Prefix,
// every request is a new key, Prefix-client-i, its body a payment of 1999
// for that key as customer; otherwise each resends a key of Replay with its
// body (the body a key was made with), client c's i-th the
// (c*7919+i*Clients)-th, cyclically.
type driveSpec struct {
	URL      string        `json:"url"`
	Duration time.Duration `json:"duration_ns"`
	Clients  int           `json:"clients"`
	Prefix   string        `json:"prefix,omitempty"`
	Replay   []string      `json:"replay,omitempty"`
}

// next returns the key and body of client's i-th request.
func (s driveSpec) next(client, i int) (key, body string) {
	if s.Prefix != "" {
		key = fmt.Sprintf("%s-%d-%d", s.Prefix, client, i)
	} else {
		key = s.Replay[(client*7919+i*s.Clients)%len(s.Replay)]
	}
	return key, paymentBody(key, 1999, "")
}

func (s driveSpec) check() error {
	switch {
	case s.URL == "" || s.Duration <= 0 || s.Clients <= 0:
		return fmt.Errorf("bench: driver: url %q, duration %s, %d clients: want a URL and both positive", s.URL, s.Duration, s.Clients)
	case (s.Prefix == "") == (len(s.Replay) == 0):
		return errors.New("bench: driver: want either a prefix for new keys or keys to replay")
	}
	return nil
}

// driven is what a driver's clients measured, its answer.
type driven struct {
	// Latencies are every request's, answered or not.
	Latencies []time.Duration `json:"latencies_ns"`
	// OK counts the requests answered below 300, Bad the others.
	OK  int `json:"ok"`
	Bad int `json:"bad"`
	// Elapsed is from the first client's start to the last one's end.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Keys are the new keys answered below 300 (none when replaying).
	Keys []string `json:"keys,omitempty"`
	// CPU is the driver's own CPU time (user and system) when its
	// clients were done, when it could read it.
	CPU time.Duration `json:"cpu_ns,omitempty"`
}

// ServeDriver is the front door's driver (EnvRole=RoleDriver): it reads a
// driveSpec (one JSON line) from in, writes "ready", waits for "go" on in,
// drives, writes "done" the moment its clients are done, then its driven
// (one JSON line). It ends when in ends after "go" (its parent gone), or
// past the spec's duration and driverSlack.
func ServeDriver(ctx context.Context, in io.Reader, out io.Writer) error {
	return serveDriver(ctx, in, out, nil)
}

// serveDriver is ServeDriver; during, when not nil, runs beside the
// clients, and the driver is done when it and they are.
func serveDriver(ctx context.Context, in io.Reader, out io.Writer, during func(context.Context)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	setup, cancelSetup := context.WithTimeout(ctx, driverSlack)
	defer cancelSetup()
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(in)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				select {
				case lines <- strings.TrimSuffix(line, "\n"):
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	read := func(what string) (string, error) {
		select {
		case line, ok := <-lines:
			if !ok {
				return "", fmt.Errorf("bench: driver: no %s: its input ended", what)
			}
			return line, nil
		case <-setup.Done():
			return "", fmt.Errorf("bench: driver: no %s: %w", what, setup.Err())
		}
	}
	line, err := read("spec")
	if err != nil {
		return err
	}
	var spec driveSpec
	if err := json.Unmarshal([]byte(line), &spec); err != nil {
		return fmt.Errorf("bench: driver: the spec: %w", err)
	}
	if err := spec.check(); err != nil {
		return err
	}
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	if _, err := fmt.Fprintln(out, driverReady); err != nil {
		return err
	}
	if line, err := read(driverGo); err != nil {
		return err
	} else if line != driverGo {
		return fmt.Errorf("bench: driver: got %q, want %q", line, driverGo)
	}
	ctx, cancelDrive := context.WithTimeout(ctx, spec.Duration+driverSlack)
	defer cancelDrive()
	go func() {
		// The input ends when the parent is gone (or done with us).
		for range lines {
		}
		cancelDrive()
	}()
	res := driveClients(ctx, hc, spec, during)
	if cpu, ok := selfCPU(); ok {
		res.CPU = cpu
	}
	if _, err := fmt.Fprintln(out, driverDone); err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(res)
}

// driveClients runs spec's clients (and during beside them) and returns
// what they measured.
func driveClients(ctx context.Context, hc *http.Client, spec driveSpec, during func(context.Context)) *driven {
	res := &driven{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(spec.Duration)
	if during != nil {
		wg.Go(func() { during(ctx) })
	}
	for c := range spec.Clients {
		wg.Go(func() {
			var lat []time.Duration
			var keys []string
			ok, bad := 0, 0
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				key, body := spec.next(c, i)
				t := time.Now()
				a, err := postJSON(ctx, hc, spec.URL, key, body)
				lat = append(lat, time.Since(t))
				if err != nil || a.status >= 300 {
					bad++
					continue
				}
				ok++
				if spec.Prefix != "" {
					keys = append(keys, key)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.Latencies = append(res.Latencies, lat...)
			res.OK += ok
			res.Bad += bad
			res.Keys = append(res.Keys, keys...)
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// postJSON sends a POST of body to url with the bench tenant's API key and
// key as its idempotency key, as a client of the API does, and returns its
// answer.
func postJSON(ctx context.Context, hc *http.Client, url, key, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(b)}, nil
}

// window is the CPU time of the devstack's process (this one) and of
// DynamoDB Local while a driver's clients ran.
type window struct {
	server, dynamo         time.Duration
	serverRead, dynamoRead bool
}

// runDriver runs spec in a driver process (this executable,
// EnvRole=RoleDriver) and returns what its clients measured, with the CPU
// time this process and DynamoDB Local's (dynamoPID, 0: none) used from
// its "go" to its "done": exactly while its clients ran, this process
// meanwhile only waiting for the line. The process is killed when ctx ends
// or past spec's duration and twice driverSlack.
func runDriver(ctx context.Context, spec driveSpec, dynamoPID int) (*driven, window, error) {
	var w window
	if err := spec.check(); err != nil {
		return nil, w, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, w, fmt.Errorf("bench: driver: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Duration+2*driverSlack)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), EnvRole+"="+RoleDriver)
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, w, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, w, err
	}
	if err := cmd.Start(); err != nil {
		return nil, w, fmt.Errorf("bench: driver: %w", err)
	}
	res, w, err := talkToDriver(spec, stdin, bufio.NewReader(stdout), dynamoPID)
	_ = stdin.Close()
	if err != nil {
		_ = cmd.Process.Kill()
	}
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("bench: driver: %w", werr)
	}
	if err != nil {
		return nil, w, errors.Join(err, ctx.Err())
	}
	return res, w, nil
}

// talkToDriver has a driver run spec (its input in, its output out) and
// reads the CPU times around its run.
func talkToDriver(spec driveSpec, in io.Writer, out *bufio.Reader, dynamoPID int) (*driven, window, error) {
	var w window
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, w, err
	}
	if _, err := in.Write(append(b, '\n')); err != nil {
		return nil, w, fmt.Errorf("bench: driver: the spec: %w", err)
	}
	expect := func(want string) error {
		line, err := out.ReadString('\n')
		if got := strings.TrimSuffix(line, "\n"); got != want {
			return fmt.Errorf("bench: driver: got %q (%v), want %q", got, err, want)
		}
		return nil
	}
	if err := expect(driverReady); err != nil {
		return nil, w, err
	}
	server0, ok0 := selfCPU()
	dynamo0, dok0 := processCPU(dynamoPID)
	if _, err := io.WriteString(in, driverGo+"\n"); err != nil {
		return nil, w, fmt.Errorf("bench: driver: %w", err)
	}
	err = expect(driverDone)
	server1, ok1 := selfCPU()
	dynamo1, dok1 := processCPU(dynamoPID)
	if err != nil {
		return nil, w, err
	}
	w = window{server: server1 - server0, dynamo: dynamo1 - dynamo0, serverRead: ok0 && ok1, dynamoRead: dok0 && dok1}
	var res driven
	if err := json.NewDecoder(out).Decode(&res); err != nil {
		return nil, w, fmt.Errorf("bench: driver: its answer: %w", err)
	}
	if len(res.Latencies) != res.OK+res.Bad {
		return nil, w, fmt.Errorf("bench: driver: %d latencies for %d requests", len(res.Latencies), res.OK+res.Bad)
	}
	return &res, w, nil
}
