package lambdamain

import (
	"context"
	"io"
	"log/slog"
	"os"
)

// LibraryLogLevel is the level of the lines that libraries write through the
// standard log package: in the functions' libraries, they all report a
// failure.
const LibraryLogLevel = slog.LevelError

// Run is a function's main: it makes the standard log package write JSON
// lines to stdout (Setup), runs run with os.Getenv, and, when run returns an
// error, writes it as a JSON line to stderr and exits with status 1. run
// returns only when the function cannot start.
func Run(run func(ctx context.Context, getenv func(string) string) error) {
	Setup(os.Stdout)
	if err := run(context.Background(), os.Getenv); err != nil {
		Fail(os.Stderr, err)
		os.Exit(1)
	}
}

// Setup makes slog's default logger, and with it the standard log package, a
// JSON logger on w; lines from the log package get LibraryLogLevel.
func Setup(w io.Writer) {
	slog.SetDefault(slog.New(slog.NewJSONHandler(w, nil)))
	slog.SetLogLoggerLevel(LibraryLogLevel)
}

// Fail writes err, which kept the function from starting, as one JSON line
// to w.
func Fail(w io.Writer, err error) {
	slog.New(slog.NewJSONHandler(w, nil)).Error("function cannot start", slog.String("error", err.Error()))
}
