package dynamoclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/logging"
)

// The defaults of Options.
const (
	// DefaultMaxAttempts is Options.MaxAttempts when unset.
	DefaultMaxAttempts = 3
	// DefaultMaxBackoff is Options.MaxBackoff when unset.
	DefaultMaxBackoff = 200 * time.Millisecond
	// DefaultTimeout is Options.Timeout when unset.
	DefaultTimeout = 2 * time.Second
	// LocalRegion is the region of an emulator's endpoint (see Config) when
	// Options.Region is unset.
	LocalRegion = "us-east-1"
)

// Options configures the clients.
type Options struct {
	// Endpoint overrides the AWS endpoint (DynamoDB Local, LocalStack); empty
	// means AWS itself.
	Endpoint string
	// Region is the AWS region. Unset: LocalRegion at an emulator's
	// Endpoint, else the SDK's own sources (AWS_REGION, AWS_DEFAULT_REGION,
	// the shared configuration), and an error when they name none.
	Region string
	// MaxAttempts bounds the SDK's attempts per call, the first included
	// (DefaultMaxAttempts, 3).
	MaxAttempts int
	// MaxBackoff caps the delay between attempts (DefaultMaxBackoff, 200ms).
	MaxBackoff time.Duration
	// Timeout bounds each HTTP attempt (DefaultTimeout, 2s).
	Timeout time.Duration
}

// withDefaults fills in the unset options.
func (o Options) withDefaults() Options {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// CallBound is the longest one call of a client built with opts can take to
// fail when DynamoDB does not answer: every attempt running out its Timeout,
// with the longest backoff between them. With the defaults, 6.4s: an
// unreachable store is answered (503 store_unavailable) within the api
// function's timeout. An attempt refused or answered with an error at once
// costs only the backoffs (0.4s by default).
func CallBound(opts Options) time.Duration {
	opts = opts.withDefaults()
	return time.Duration(opts.MaxAttempts)*opts.Timeout + time.Duration(opts.MaxAttempts-1)*opts.MaxBackoff
}

// Config loads the AWS configuration for opts. Against a local endpoint it
// uses static dummy credentials, so nothing needs an AWS account; against an
// endpoint of AWS itself (a host under one of awsDomains: a VPC, FIPS or
// dual-stack endpoint) the usual credentials (the function's role), as
// without an endpoint, since AWS refuses dummy ones ("The security token
// included in the request is invalid"). Only an emulator's endpoint (see
// isEmulator) defaults the region, to LocalRegion: any other endpoint is
// AWS's or may be, and a call signed for a region not its own fails with a
// signature error, so its region comes from the environment as without an
// endpoint. An endpoint that is not an absolute http(s) URL, and no region
// at all (AWS_REGION unset outside Lambda with no endpoint or one that is
// not an emulator's), are errors here rather than at the first call.
func Config(ctx context.Context, opts Options) (aws.Config, error) {
	opts = opts.withDefaults()
	loaders := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = opts.MaxAttempts
				o.MaxBackoff = opts.MaxBackoff
			})
		}),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTimeout(opts.Timeout).
			WithTransportOptions(keepIdleConns)),
		config.WithLogger(logging.LoggerFunc(sdkLog)),
	}
	if opts.Region != "" {
		loaders = append(loaders, config.WithRegion(opts.Region))
	}
	if opts.Endpoint != "" {
		u, err := url.Parse(opts.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return aws.Config{}, fmt.Errorf("dynamoclient: endpoint %q is not an absolute http(s) URL (such as http://localhost:8000)", opts.Endpoint)
		}
		if opts.Region == "" && isEmulator(u.Hostname()) {
			loaders = append(loaders, config.WithRegion(LocalRegion))
		}
		if !isAWS(u.Hostname()) {
			loaders = append(loaders, config.WithCredentialsProvider(
				credentials.NewStaticCredentialsProvider("local", "local", "")))
		}
	}
	cfg, err := config.LoadDefaultConfig(ctx, loaders...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("dynamoclient: load AWS config: %w", err)
	}
	switch {
	case cfg.Region != "":
	case opts.Endpoint == "":
		return aws.Config{}, errors.New("dynamoclient: no AWS region: set AWS_REGION (Lambda sets it)")
	default:
		return aws.Config{}, fmt.Errorf("dynamoclient: no AWS region for endpoint %q: set AWS_REGION to its region"+
			" (only an emulator's endpoint, on a loopback address, localhost, localstack or host.docker.internal,"+
			" defaults to %s)", opts.Endpoint, LocalRegion)
	}
	return cfg, nil
}

// awsDomains are the DNS suffixes of AWS's own endpoints, in every partition
// (the dnsSuffix and dualStackDnsSuffix of each partition in the SDK's
// internal/endpoints/awsrulesfn/partitions.json, v1.48.0).
var awsDomains = []string{
	"amazonaws.com", "api.aws",
	"amazonaws.com.cn", "api.amazonwebservices.com.cn",
	"amazonaws.eu", "api.amazonwebservices.eu",
	"c2s.ic.gov", "api.aws.ic.gov",
	"sc2s.sgov.gov", "api.aws.scloud",
	"cloud.adc-e.uk", "api.cloud-aws.adc-e.uk",
	"csp.hci.ic.gov", "api.aws.hci.ic.gov",
}

// isAWS reports whether host is an AWS endpoint's: one of awsDomains or
// under one.
func isAWS(host string) bool { return under(host, awsDomains) }

// emulatorHosts are the hosts of the emulators once runs against besides
// loopback addresses: localhost (RFC 6761), LocalStack's Docker Compose
// service (localstack/docker-compose.yml) and its domain, which resolves to
// 127.0.0.1, and the host seen from a container (sam local invoke, as the
// README runs it).
var emulatorHosts = []string{"localhost", "localstack", "localhost.localstack.cloud", "host.docker.internal"}

// isEmulator reports whether host is an emulator's (DynamoDB Local,
// LocalStack, the devstack's SQS): a loopback address, or one of
// emulatorHosts or a name under one. No AWS endpoint is one of these.
func isEmulator(host string) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	return under(host, emulatorHosts)
}

// under reports whether host is one of domains or a name under one, in any
// case, with or without the root's trailing dot.
func under(host string, domains []string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, d := range domains {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// sdkLog writes the SDK's own log lines (a warning such as a response body
// it could not discard after a connection broke) as structured lines, at
// their level, to sdkLogger: the SDK's default logger would print
// unstructured lines to stderr.
func sdkLog(c logging.Classification, format string, v ...any) {
	level := slog.LevelWarn
	if c == logging.Debug {
		level = slog.LevelDebug
	}
	sdkLogger().Log(context.Background(), level, "aws sdk", "detail", fmt.Sprintf(format, v...))
}

// stderr is where the SDK's lines go when the program has not set slog's
// default logger.
var stderr io.Writer = os.Stderr

// sdkLogger is slog's default logger once the program has set one (the
// functions set a JSON one; a library user sets theirs), else a JSON logger
// on stderr: slog's built-in default writes text lines through package log.
func sdkLogger() *slog.Logger {
	l := slog.Default()
	if fmt.Sprintf("%T", l.Handler()) == "*slog.defaultHandler" {
		return slog.New(slog.NewJSONHandler(stderr, nil))
	}
	return l
}

// keepIdleConns lets the pool keep as many idle connections to the one
// endpoint the clients call as it keeps in all (100), not the SDK's 10 per
// host: a function instance that runs more than 10 calls at once (several
// invocations per environment on Lambda Managed Instances, every execution
// environment of the devstack on one client) would otherwise close the
// connections beyond 10 after each burst and open new ones for the next.
func keepIdleConns(t *http.Transport) {
	t.MaxIdleConnsPerHost = t.MaxIdleConns
}

// New returns a DynamoDB client for cfg. With the endpoint of an emulator it
// turns off the CRC32 response check: DynamoDB Local sends a checksum of 0 on
// error responses, which the SDK would otherwise log as a warning on every
// conditional-check failure. An AWS endpoint keeps it.
func New(cfg aws.Config, endpoint string) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			u, err := url.Parse(endpoint)
			o.DisableValidateResponseChecksum = err != nil || !isAWS(u.Hostname())
		}
	})
}
