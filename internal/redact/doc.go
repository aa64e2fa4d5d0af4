// Package redact hides the secrets in connection strings before they are
// printed or logged: passwords in URLs (postgres://user:pass@host/db,
// ?password=...) and in keyword/value strings (host=h password=p).
package redact
