package redact

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://postgres:ordo@127.0.0.1:5432/ordo?sslmode=disable":     "postgres://postgres:xxxxx@127.0.0.1:5432/ordo?sslmode=disable",
		"postgres://u@h/db?password=hunter2&sslmode=verify-full":           "postgres://u@h/db?password=xxxxx&sslmode=verify-full",
		"postgresql://u:p%40ss@h/db?sslpassword=k&sslrootcert=/etc/ca.pem": "postgresql://u:xxxxx@h/db?sslpassword=xxxxx&sslrootcert=/etc/ca.pem",
		"host=h user=u password=hunter2 dbname=d":                          "host=h user=u password=xxxxx dbname=d",
		"host=h PASSWORD = 'a b\\' c' dbname=d":                            "host=h PASSWORD = xxxxx dbname=d",
		"http://127.0.0.1:2379":                                            "http://127.0.0.1:2379",
		"postgres://u@h/db":                                                "postgres://u@h/db",
		"--pg":                                                             "--pg",
		"postgres://u:p@h:bad port/db":                                     "postgres://xxxxx@h:bad port/db",
	} {
		got := Redact(in)
		if got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
		for _, secret := range []string{"ordo@", "hunter2", "p%40ss", "a b"} {
			if strings.Contains(in, secret) && strings.Contains(got, secret) {
				t.Errorf("Redact(%q) = %q still holds %q", in, got, secret)
			}
		}
	}
	args := []string{"node", "--pg", "postgres://a:b@h/d"}
	if got := Args(args); got[2] != "postgres://a:xxxxx@h/d" || args[2] != "postgres://a:b@h/d" {
		t.Errorf("Args: %q (input now %q)", got, args)
	}
}
