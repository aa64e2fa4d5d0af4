package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every secret Redact hides.
const Mask = "xxxxx"

// secretParams are the query parameters and keywords that hold secrets
// (libpq's and pgx's).
var secretParams = []string{"password", "sslpassword"}

// keyword matches a secret keyword/value pair: the value quoted (libpq
// style, with backslash escapes) or up to the next space.
var keyword = regexp.MustCompile(`(?i)\b(` + strings.Join(secretParams, "|") + `)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// Redact returns s with its secrets replaced by Mask: in a URL
// (scheme://...), the password of its user information and the values of
// its password and sslpassword query parameters; in anything else, the
// values of password= and sslpassword= keywords. A string without a
// secret is returned unchanged.
func Redact(s string) string {
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil {
			changed := false
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), Mask)
				changed = true
			}
			parts := strings.Split(u.RawQuery, "&")
			for i, kv := range parts {
				k, _, _ := strings.Cut(kv, "=")
				if secretParam(k) {
					parts[i] = k + "=" + Mask
					changed = true
				}
			}
			u.RawQuery = strings.Join(parts, "&")
			if !changed {
				return s
			}
			return u.String()
		}
		// Unparseable: hide whatever stands between "://" and the last "@".
		scheme, rest, _ := strings.Cut(s, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = Mask + rest[at:]
		}
		s = scheme + "://" + rest
	}
	return keyword.ReplaceAllString(s, "${1}${2}"+Mask)
}

func secretParam(k string) bool {
	if uk, err := url.QueryUnescape(k); err == nil {
		k = uk
	}
	for _, p := range secretParams {
		if strings.EqualFold(k, p) {
			return true
		}
	}
	return false
}

// Args returns a copy of args with Redact applied to each, for printing a
// command line.
func Args(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = Redact(a)
	}
	return out
}
