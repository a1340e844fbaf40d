package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/apigw"
	apifn "github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/ddblocal"
	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/lambdaenv"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/samtemplate"
)

// Environment read by Start besides config.FromEnv's variables.
const (
	EnvDevAPIKeys   = "ONCE_DEV_API_KEYS"
	EnvPort         = "PORT"
	EnvProviderPort = "PROVIDER_PORT"
	// EnvSQSPort is where the local SQS endpoint listens when SQS_ENDPOINT
	// names none (DefaultSQSPort).
	EnvSQSPort = "SQS_PORT"
	// EnvDevTTL set to "off" creates the tables without TTL, so that
	// nothing expires by itself, as on AWS within minutes (see Options).
	EnvDevTTL = "ONCE_DEV_TTL"
)

// Defaults of Start.
const (
	DefaultPort = 3000
	// DefaultProviderPort is where the provider simulator listens when
	// ONCE_PROVIDER_URL names no provider.
	DefaultProviderPort = 3001
	// DefaultSQSPort is the local SQS endpoint's port (ElasticMQ's, which
	// SQS tools often expect locally).
	DefaultSQSPort = 9324
	// DefaultStateDir holds the dead letters of the stream mappings.
	DefaultStateDir = ".devstack"
	// DefaultShutdownTimeout bounds Close: API Gateway's integration timeout,
	// so that running requests can finish, and a little more.
	DefaultShutdownTimeout = gateway.DefaultIntegrationTimeout + 5*time.Second
)

// host is the only interface the devstack listens on.
const host = "127.0.0.1"

// Options configures Start.
type Options struct {
	// Getenv reads the environment (os.Getenv in cmd/devstack): the
	// functions' variables (see config.FromEnv), DYNAMODB_ENDPOINT (unset:
	// start DynamoDB Local), ONCE_DEV_API_KEYS (auth.DefaultDevAPIKeys) and
	// PORT (DefaultPort; 0 picks a free one). Required.
	Getenv func(string) string
	// Output receives the JSON log lines and the metric lines, as a Lambda
	// function's stdout does; nil discards them.
	Output io.Writer
	// TemplatePath is the SAM template; empty means template.yaml in the
	// working directory or its nearest parent that has one.
	TemplatePath string
	// DynamoDBLocalDir is where DynamoDB Local is cached (ddblocal's default
	// when empty).
	DynamoDBLocalDir string
	// ShutdownTimeout bounds Close (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// StateDir receives the stream mappings' dead letters (DefaultStateDir
	// beside the template when empty).
	StateDir string
	// WithoutTTL creates the tables without enabling their TTL attribute
	// (as does ONCE_DEV_TTL=off): DynamoDB Local deletes expired items
	// within seconds, AWS within days, so only without TTL does the stack
	// show what recovers without it.
	WithoutTTL bool
	// Routes are routes of the api function that the template does not
	// declare, served the same way as its own (the gateway, the
	// authorizer, the api function's execution environments and Lambda
	// adapter): a benchmark compares the API with a route of its own.
	Routes []Route
	// StreamsOff lists functions (by logical ID) whose DynamoDB stream
	// event sources are not polled: a benchmark of the API alone leaves
	// the worker, which charges every payment, off.
	StreamsOff []string
	// WrapProvider, when set, wraps the provider simulator's handler inside
	// its function URL, after the URL's authorization: what reaches it is
	// an invocation of the function (a test counts them).
	WrapProvider func(http.Handler) http.Handler
}

// Route is an extra route of the api function (Options.Routes).
type Route struct {
	// Method and Resource are matched by the gateway as a template's Api
	// event's: POST, /bench/payments.
	Method, Resource string
	// Handler builds the route's handler in each execution environment of
	// the api function, from what the API's own handler is built from.
	Handler func(cfg config.Config, client *dynamodb.Client, opts app.Options) http.Handler
}

// Stack is a running devstack.
type Stack struct {
	opts   Options
	output io.Writer
	log    *slog.Logger
	cfg    config.Config
	keys   []auth.Pair
	port   int
	// providerPort is the simulator's port (PROVIDER_PORT).
	providerPort int
	// providerAuth is the AuthType of the simulator's function URL, "" when
	// the stack does not serve it.
	providerAuth string
	stateDir     string
	tmpl         *samtemplate.Template
	api          api

	client *dynamodb.Client
	// dynamoPID is the process ID of the DynamoDB Local the stack started,
	// 0 when it uses another.
	dynamoPID int
	clients   queue.Clients // client and the SQS client, for the functions that use queues
	emulator  *gateway.Emulator
	url       string

	components []component // started, in order
	failed     chan error  // a component that failed while running

	closeOnce sync.Once
	closeErr  error
}

// component is something Start started and Close stops.
type component struct {
	name string
	stop func(context.Context) error
}

// Start starts the stack and returns once it serves requests at URL. ctx
// bounds the start only; the stack runs until Close, which the caller must
// call. A failed start stops whatever had started.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	s, err := newStack(opts)
	if err != nil {
		return nil, err
	}
	steps := []struct {
		name  string
		start func(context.Context) error
	}{
		{"dynamodb", s.startDynamoDB},
		{"tables", s.createTables},
		{"queues", s.startQueues},
		{"api keys", s.seedKeys},
		{"provider", s.startProvider},
		{"streams", s.startStreams},
		{"queue mappings", s.startQueueMappings},
		{"gateway", s.startGateway},
	}
	for _, step := range steps {
		if err := step.start(ctx); err != nil {
			return nil, errors.Join(fmt.Errorf("devstack: %s: %w", step.name, err), s.Close())
		}
	}
	s.log.Info("devstack: ready", "url", s.url, "stage", s.api.stage, "dynamodb", s.cfg.DynamoDBEndpoint)
	return s, nil
}

func newStack(opts Options) (*Stack, error) {
	if opts.Getenv == nil {
		return nil, errors.New("devstack: Options.Getenv is required")
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	out := opts.Output
	if out == nil {
		out = io.Discard
	}
	path := opts.TemplatePath
	if path == "" {
		var err error
		if path, err = findTemplate(); err != nil {
			return nil, err
		}
	}
	tmpl, err := samtemplate.Load(path)
	if err != nil {
		return nil, err
	}
	cfg, keys, port, providerPort, err := fromEnv(opts.Getenv, tableIDs(tmpl))
	if err != nil {
		return nil, err
	}
	a, err := apiFromTemplate(tmpl)
	if err != nil {
		return nil, err
	}
	stateDir := opts.StateDir
	if stateDir == "" {
		stateDir = filepath.Join(filepath.Dir(path), DefaultStateDir)
	}
	return &Stack{
		opts:         opts,
		output:       out,
		log:          app.Logger(out, cfg.LogLevel),
		cfg:          cfg,
		keys:         keys,
		port:         port,
		providerPort: providerPort,
		stateDir:     stateDir,
		tmpl:         tmpl,
		api:          a,
		failed:       make(chan error, 1),
	}, nil
}

// fromEnv parses the devstack's environment, the names of the tables
// (logical IDs) included, reporting every problem at once.
func fromEnv(getenv func(string) string, tables []string) (cfg config.Config, keys []auth.Pair, port, providerPort int, err error) {
	var errs []error
	cfg, err = config.FromEnv(getenv)
	errs = append(errs, err, config.CheckTables(getenv, tables...))

	spec := strings.TrimSpace(getenv(EnvDevAPIKeys))
	if spec == "" {
		spec = auth.DefaultDevAPIKeys
	}
	keys, err = auth.ParsePairs(spec)
	if err != nil {
		errs = append(errs, fmt.Errorf("devstack: %s: %w", EnvDevAPIKeys, err))
	}

	portOf := func(name string, def int) int {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def
		}
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("devstack: %s=%q: not a port number (0-65535)", name, v))
		}
		return p
	}
	port = portOf(EnvPort, DefaultPort)
	providerPort = portOf(EnvProviderPort, DefaultProviderPort)
	if err := errors.Join(errs...); err != nil {
		return config.Config{}, nil, 0, 0, err
	}
	return cfg, keys, port, providerPort, nil
}

// onStop registers a started component.
func (s *Stack) onStop(name string, stop func(context.Context) error) {
	s.components = append(s.components, component{name: name, stop: stop})
}

// startDynamoDB starts DynamoDB Local unless DYNAMODB_ENDPOINT names one,
// and builds the client.
func (s *Stack) startDynamoDB(ctx context.Context) error {
	if s.cfg.DynamoDBEndpoint == "" {
		// DynamoDB Local lives until Close; ctx may only abort its start.
		life, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopAbort := context.AfterFunc(ctx, cancel)
		srv, err := ddblocal.Start(life, ddblocal.Options{
			Dir:    s.opts.DynamoDBLocalDir,
			Logger: s.log.With("component", "dynamodb-local"),
		})
		stopAbort()
		if err != nil {
			cancel()
			return err
		}
		s.onStop("dynamodb local", func(context.Context) error {
			defer cancel()
			return srv.Stop()
		})
		s.cfg.DynamoDBEndpoint = srv.Endpoint()
		s.dynamoPID = srv.PID()
	}
	client, err := app.DynamoDB(ctx, s.cfg)
	if err != nil {
		return err
	}
	s.client = client
	// The functions, the SQS endpoint and the simulator's function URL use
	// the region the client resolved (LocalRegion at an emulator's endpoint
	// without AWS_REGION), as the functions sign in their client's region.
	s.cfg.Region = client.Options().Region
	return nil
}

// createTables creates the template's tables; existing ones are left alone.
func (s *Stack) createTables(ctx context.Context) error {
	tables, err := tablesFor(s.tmpl, s.cfg)
	if err != nil {
		return err
	}
	switch v := strings.TrimSpace(s.opts.Getenv(EnvDevTTL)); v {
	case "", "on":
	case "off":
		s.opts.WithoutTTL = true
	default:
		return fmt.Errorf("devstack: %s=%q: must be on or off", EnvDevTTL, v)
	}
	if s.opts.WithoutTTL {
		for i := range tables {
			tables[i].TTLAttribute = ""
		}
		s.log.Warn("devstack: TTL is off: expired items stay, as on AWS within minutes; the checker recovers abandoned reservations")
	}
	if err := s.dropUnpolledStreams(tables); err != nil {
		return err
	}
	if err := samtemplate.Create(ctx, s.client, tables); err != nil {
		return err
	}
	names := make([]string, 0, len(tables))
	for _, t := range tables {
		names = append(names, aws.ToString(t.Input.TableName))
	}
	s.log.Info("devstack: tables ready", "tables", names)
	return nil
}

// dropUnpolledStreams creates without its stream each table whose stream no
// mapping of the stack reads (a function in Options.StreamsOff, an event
// switched off in the template): DynamoDB Local writes stream records as
// part of each write and grows slower as they accumulate (a two-item
// transaction on tables with streams cost it 2 to 7 times the CPU of one on
// tables without, the more so the more records it held), a cost AWS does
// not put on the request, for records nothing would read.
func (s *Stack) dropUnpolledStreams(tables []samtemplate.Table) error {
	mappings, _, err := s.mappings()
	if err != nil {
		return err
	}
	polled := map[string]bool{}
	for _, m := range mappings {
		polled[m.table] = true
	}
	for i, t := range tables {
		if t.Input.StreamSpecification == nil || polled[t.LogicalID] {
			continue
		}
		in := *t.Input
		in.StreamSpecification = nil
		tables[i].Input = &in
		s.log.Info("devstack: table without its stream: no mapping reads it", "table", aws.ToString(in.TableName))
	}
	return nil
}

// seedKeys stores the demo API keys (hashed). It logs the tenants, never the
// keys.
func (s *Stack) seedKeys(ctx context.Context) error {
	if err := auth.Seed(ctx, s.client, s.cfg.Table("ApiKeysTable"), s.keys); err != nil {
		return err
	}
	tenants := make([]string, 0, len(s.keys))
	for _, p := range s.keys {
		tenants = append(tenants, p.Tenant+" ("+auth.ShortHash(p.Key)+")")
	}
	s.log.Info("devstack: API keys seeded", "table", s.cfg.Table("ApiKeysTable"), "tenants", tenants)
	return nil
}

// startGateway puts the API Gateway emulator in front of the authorizer and
// api functions, each built exactly as its main builds it and run in Lambda
// execution environments (package lambdaenv), and serves it.
func (s *Stack) startGateway(context.Context) error {
	api := lambdaenv.New("api", func() (any, error) {
		opts := app.Options{Logger: s.log.With("function", "api"), Metrics: s.output}
		h, err := apifn.Handler(s.cfg, s.client, opts)
		if err != nil {
			return nil, err
		}
		if len(s.opts.Routes) > 0 {
			mux := http.NewServeMux()
			for _, rt := range s.opts.Routes {
				mux.Handle(rt.Method+" "+rt.Resource, rt.Handler(s.cfg, s.client, opts))
			}
			mux.Handle("/", h)
			h = mux
		}
		return apigw.NewLambda(h), nil
	})
	authorizer := lambdaenv.New("authorizer", func() (any, error) {
		keys := auth.NewKeys(s.client, s.cfg.Table("ApiKeysTable"))
		return auth.NewAuthorizer(keys, s.log.With("function", "authorizer")).Handle, nil
	})
	// A crash (an injected one too) is a function error, logged as the
	// runtime logs it; the gateway answers it with the template's
	// DEFAULT_5XX.
	api.Logger = s.log.With("function", "api")
	authorizer.Logger = s.log.With("function", "authorizer")
	// One warm environment each: an init error stops the start.
	for _, fn := range []*lambdaenv.Function{api, authorizer} {
		if err := fn.Provision(1); err != nil {
			return err
		}
	}
	routes := slices.Clip(s.api.routes)
	for _, rt := range s.opts.Routes {
		routes = append(routes, gateway.Route{Method: rt.Method, Resource: rt.Resource})
	}
	s.emulator = &gateway.Emulator{
		Authorize:        gateway.LambdaAuthorizer(authorizer),
		Invoke:           gateway.LambdaProxy(api),
		Routes:           routes,
		Stage:            s.api.stage,
		Region:           s.cfg.Region,
		AuthorizerTTL:    s.api.authorizerTTL,
		BinaryMediaTypes: s.api.binaryMediaTypes,
		Responses:        s.api.responses,
		Logger:           s.log.With("component", "gateway"),
	}

	// Requests Go's server refuses itself get API Gateway's JSON shape too.
	srv, url, err := s.serve("gateway", s.port, s.emulator, func(ln net.Listener) net.Listener {
		return gateway.Listener(ln, s.log.With("component", "gateway"))
	})
	if err != nil {
		return err
	}
	s.onStop("gateway", func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if err != nil {
			srv.Close()
		}
		return errors.Join(err, s.emulator.Wait(ctx))
	})
	s.url = url
	return nil
}

// serve serves h on 127.0.0.1:port (0 picks a free port), through wrap's
// listener when wrap is not nil, until it is shut down, reporting a server
// that stops on its own as the component name's failure, and returns the
// server and its base URL.
func (s *Stack) serve(name string, port int, h http.Handler, wrap func(net.Listener) net.Listener) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, "", fmt.Errorf("listen: %w", err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.fail(fmt.Errorf("devstack: %s: %w", name, err))
		}
	}()
	return srv, "http://" + addr, nil
}

// fail reports a component that stopped on its own.
func (s *Stack) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// URL is the API's base URL, http://127.0.0.1:PORT.
func (s *Stack) URL() string { return s.url }

// DynamoDBLocalPID is the process ID of the DynamoDB Local the stack
// started, 0 when DYNAMODB_ENDPOINT named one (a benchmark reads its CPU
// time).
func (s *Stack) DynamoDBLocalPID() int { return s.dynamoPID }

// DynamoDBEndpoint is the DynamoDB endpoint the stack uses.
func (s *Stack) DynamoDBEndpoint() string { return s.cfg.DynamoDBEndpoint }

// SQSEndpoint is the SQS endpoint the stack uses.
func (s *Stack) SQSEndpoint() string { return s.cfg.SQSEndpoint }

// Config is the configuration the functions run with.
func (s *Stack) Config() config.Config { return s.cfg }

// Wait blocks until ctx is done (it then returns nil) or a component fails
// while running (it returns why). It does not stop the stack.
func (s *Stack) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.failed:
		return err
	}
}

// Close stops the components in reverse order of their start: the gateway
// first, letting running requests finish, then the database. It is safe to
// call more than once.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
		defer cancel()
		var errs []error
		for i := len(s.components) - 1; i >= 0; i-- {
			c := s.components[i]
			if err := c.stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("devstack: stop %s: %w", c.name, err))
				continue
			}
			s.log.Info("devstack: stopped", "component", c.name)
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
