// Command bench is `make bench`: it measures once against its baselines on
// DynamoDB Local (DYNAMODB_ENDPOINT, or the ONCE_TEST_DYNAMODB_ENDPOINT that
// scripts/with-dynamodb.sh sets) and prints one table (package
// internal/bench); -out also writes it as JSON.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/oncehq/once/internal/bench"
)

func main() {
	if err := run(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(getenv func(string) string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch getenv(bench.EnvRole) {
	case "provider":
		return bench.ServeProvider(ctx, getenv, os.Stdout)
	case bench.RoleDriver:
		return bench.ServeDriver(ctx, os.Stdin, os.Stdout)
	}
	template := flag.String("template", "template.yaml", "the repository's `template.yaml`")
	functions := flag.String("functions", "", "`dir`ectory of the built functions, <name>/bootstrap (none: no cold starts)")
	out := flag.String("out", getenv("BENCH_OUT"), "also write the table as JSON to `file`")
	scale := flag.Float64("scale", 1, "multiply the samples, durations and cold starts by `f`")
	only := flag.String("only", "", "run only these `parts`, comma-separated, of "+strings.Join(bench.Parts, ","))
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run (the devstack runs in this process) to `file`")
	flag.Parse()
	if s := getenv("BENCH_SCALE"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("BENCH_SCALE=%q: want a positive number", s)
		}
		*scale = f
	}
	endpoint := getenv("DYNAMODB_ENDPOINT")
	fresh := endpoint == ""
	if endpoint == "" {
		endpoint = getenv("ONCE_TEST_DYNAMODB_ENDPOINT")
	}
	if endpoint == "" {
		return errors.New("no DynamoDB: set DYNAMODB_ENDPOINT, or run it through `make bench`")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, bench.Options{
		DynamoDB:      endpoint,
		FreshDynamoDB: fresh,
		TemplatePath:  *template,
		Functions:     *functions,
		Settings:      bench.DefaultSettings.Scale(*scale),
		Provider:      bench.StartProvider,
		Log:           os.Stderr,
		Only:          strings.FieldsFunc(*only, func(r rune) bool { return r == ',' }),
	})
	if err != nil {
		return err
	}
	if err := rep.WriteMarkdown(os.Stdout); err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
