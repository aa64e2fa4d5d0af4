// Package pgtest gives tests a PostgreSQL server and a private schema on it.
//
// Tests read the server's URL from ORDO_PG_URL and skip, saying how to run
// them, when it is unset or the server is unreachable, unless
// ORDO_REQUIRE_PG=1, which turns both cases into failures (CI sets it).
// Its functions are safe for concurrent use.
package pgtest
