package chaos

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-actors/ordo/internal/redact"
)

// freshDatabase drops and recreates the database name on the server of
// pgURL and returns pgURL pointing at it. Every run needs its own: the
// fences a previous run left behind are higher than the epochs of a new
// etcd cluster, and its accounts would break conservation.
func freshDatabase(ctx context.Context, pgURL, name string) (string, error) {
	u, err := url.Parse(pgURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("chaos: --pg %q: want a postgres:// URL", redact.Redact(pgURL))
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return "", fmt.Errorf("chaos: connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + ident + " WITH (FORCE)", "CREATE DATABASE " + ident} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("chaos: %s: %w", strings.SplitN(q, " ", 3)[:2], err)
		}
	}
	u.Path = "/" + name
	return u.String(), nil
}
