// Package configerr makes the errors of the packages' Config.Validate
// methods: each keeps its message and also matches its package's
// ErrInvalidConfig.
package configerr

// Wrap returns err, which also matches sentinel (errors.Is); its message
// is err's.
func Wrap(sentinel, err error) error { return &wrapped{sentinel, err} }

type wrapped struct{ sentinel, err error }

func (e *wrapped) Error() string   { return e.err.Error() }
func (e *wrapped) Unwrap() []error { return []error{e.sentinel, e.err} }
