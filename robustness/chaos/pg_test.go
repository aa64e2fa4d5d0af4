package chaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestFreshDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := freshDatabase(ctx, "mysql://x", "d"); err == nil {
		t.Fatal("non-postgres URL accepted")
	}
	pgURL := os.Getenv("ORDO_PG_URL")
	if pgURL == "" {
		if os.Getenv("ORDO_REQUIRE_PG") != "" {
			t.Fatal("ORDO_REQUIRE_PG is set but ORDO_PG_URL is not")
		}
		t.Skip("ORDO_PG_URL not set")
	}
	const name = "ordo_chaos_test"
	for range 2 { // the second time drops what the first made
		u, err := freshDatabase(ctx, pgURL, name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(u, "/"+name) {
			t.Fatalf("URL %s", u)
		}
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'").Scan(&n)
		if err == nil && n == 0 {
			_, err = conn.Exec(ctx, "CREATE TABLE leftover (x int)")
		}
		conn.Close(ctx)
		if err != nil || n != 0 {
			t.Fatalf("fresh database holds %d tables (%v)", n, err)
		}
	}
}
