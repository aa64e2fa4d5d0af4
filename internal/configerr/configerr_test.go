package configerr_test

import (
	"errors"
	"testing"

	"github.com/ordo-actors/ordo/internal/configerr"
)

func TestWrap(t *testing.T) {
	sentinel, cause := errors.New("pkg: invalid config"), errors.New("pkg: Size must be positive")
	err := configerr.Wrap(sentinel, cause)
	if !errors.Is(err, sentinel) || !errors.Is(err, cause) || err.Error() != cause.Error() {
		t.Fatalf("%v: want both matched and the cause's message", err)
	}
}
