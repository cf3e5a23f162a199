package testenv

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Main runs a suite's TestMain: the controllers' logs at error level, so that the summary of a
// passing run stays readable (everything with -v); run starts the real components and runs the
// tests, and its error fails the binary.
func Main(m *testing.M, run func(*testing.M) (int, error)) {
	flag.Parse()
	level := zapcore.ErrorLevel
	if testing.Verbose() {
		level = zapcore.DebugLevel
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(level)))
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}
