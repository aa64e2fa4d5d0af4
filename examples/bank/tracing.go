package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/credentials"
)

// serviceName is the OpenTelemetry service name of the bank's processes.
const serviceName = "ordo-bank"

// newTracerProvider returns a provider that exports to exp in batches and
// samples ratio of the traces that start in this process (a trace
// started elsewhere is sampled as its parent was, so a sampled transfer
// has every span on every node).
func newTracerProvider(exp sdktrace.SpanExporter, ratio float64, attrs ...attribute.KeyValue) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(append(attrs, attribute.String("service.name", serviceName))...)))
}

// otlpFlags are bank node's tracing flags: spans to an OpenTelemetry
// collector over OTLP/gRPC.
type otlpFlags struct {
	endpoint string
	insecure bool
	ca       string
	ratio    float64
}

func (f *otlpFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoint, "otlp-endpoint", "", "host:port of an OpenTelemetry collector (OTLP/gRPC) to send spans to; empty: no tracing")
	fs.BoolVar(&f.insecure, "otlp-insecure", false, "send spans to the collector in plaintext (default: TLS)")
	fs.StringVar(&f.ca, "otlp-ca", "", "CA bundle (PEM) the collector's certificate is verified against (default: the system's)")
	fs.Float64Var(&f.ratio, "trace-ratio", 1, "fraction of the traces starting on this node that are recorded (traces started by a caller follow its decision)")
}

func (f *otlpFlags) validate() error {
	switch {
	case f.endpoint == "" && (f.insecure || f.ca != ""):
		return usagef("--otlp-insecure and --otlp-ca need --otlp-endpoint")
	case f.insecure && f.ca != "":
		return usagef("--otlp-insecure and --otlp-ca exclude each other")
	case !(f.ratio >= 0 && f.ratio <= 1):
		return usagef("--trace-ratio %v: want a fraction in [0, 1]", f.ratio)
	}
	return nil
}

// provider returns the tracer provider of node that exports to the
// collector, nil without --otlp-endpoint. Nothing is dialed yet: spans
// that cannot be sent are dropped, never the node's work.
func (f *otlpFlags) provider(ctx context.Context, node string) (*sdktrace.TracerProvider, error) {
	if f.endpoint == "" {
		return nil, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(f.endpoint)}
	switch {
	case f.insecure:
		opts = append(opts, otlptracegrpc.WithInsecure())
	default:
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.ca != "" {
			pem, err := os.ReadFile(f.ca)
			if err != nil {
				return nil, usagef("--otlp-ca: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, usagef("--otlp-ca %s: no PEM certificate", f.ca)
			}
		}
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc)))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	return newTracerProvider(exp, f.ratio, attribute.String("service.instance.id", node)), nil
}

// syncWriter serializes writes to w: the demo's report and its spans
// share stdout.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// stdoutProvider returns a provider that writes spans to w, one JSON
// object per line (stdouttrace), sampling ratio of the traces.
func stdoutProvider(w io.Writer, ratio float64) (*sdktrace.TracerProvider, error) {
	exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
	if err != nil {
		return nil, err
	}
	return newTracerProvider(exp, ratio), nil
}
