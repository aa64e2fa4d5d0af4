package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables read by URL.
const (
	// EnvURL names the variable holding the server's connection string.
	EnvURL = "ORDO_PG_URL"
	// EnvRequire names the variable that, set to 1, makes a missing or
	// unreachable server fail tests instead of skipping them.
	EnvRequire = "ORDO_REQUIRE_PG"
)

const howTo = "ORDO_PG_URL=postgres://postgres:ordo@127.0.0.1:5432/ordo_test?sslmode=disable go test ./persistence/pgstore"

var (
	pingOnce sync.Once
	pingErr  error
)

// URL returns the test server's URL, or skips (fails with ORDO_REQUIRE_PG=1)
// when there is none or it does not answer.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvURL)
	require := os.Getenv(EnvRequire) == "1"
	if url == "" {
		if require {
			t.Fatalf("%s=1 but %s is not set; run: %s", EnvRequire, EnvURL, howTo)
		}
		t.Skipf("PostgreSQL tests need a server; run: %s", howTo)
	}
	pingOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			pingErr = err
			return
		}
		defer conn.Close(ctx)
		pingErr = conn.Ping(ctx)
	})
	if pingErr != nil {
		if require {
			t.Fatalf("%s=1 but the server at %s is unreachable: %v", EnvRequire, EnvURL, pingErr)
		}
		t.Skipf("PostgreSQL at %s unreachable (%v); run: %s", EnvURL, pingErr, howTo)
	}
	return url
}

// Schema returns the name of a fresh schema for one test and drops it, with
// everything in it, when the test ends. The schema itself is not created.
func Schema(t testing.TB) string {
	t.Helper()
	url := URL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "ordo_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		// t.Context is canceled by the time cleanups run.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if err := Exec(ctx, url, fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE", pgx.Identifier{name}.Sanitize())); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// Exec runs sql on a connection of its own.
func Exec(ctx context.Context, url, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}
