package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// ErrClosed is returned by Writer methods called after Close.
var ErrClosed = errors.New("history: writer closed")

// Writer appends ops to a history as JSON lines. Output is buffered: call
// Flush to push buffered lines to the underlying writer and Close when done.
// A Writer is safe for concurrent use; each op is written as one whole line.
// After the first write error every later call returns that error.
type Writer struct {
	mu     sync.Mutex
	bw     *bufio.Writer
	file   *os.File // set when the Writer owns the file (Create)
	err    error    // sticky write error
	closed bool
}

// NewWriter returns a Writer that appends to w. Close flushes but does not
// close w; the caller owns it.
func NewWriter(w io.Writer) *Writer {
	return &Writer{bw: bufio.NewWriterSize(w, 64<<10)}
}

// Create creates (or truncates) the file at path and returns a Writer that
// owns it: Close flushes, syncs and closes the file.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	w := NewWriter(f)
	w.file = f
	return w, nil
}

// Append validates op and writes it as one line. An invalid op is not
// written and gives an error matching ErrInvalid.
func (w *Writer) Append(op Op) error {
	if err := op.Validate(); err != nil {
		return err
	}
	line, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("history: encode: %w", err)
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if _, err := w.bw.Write(line); err != nil {
		w.err = fmt.Errorf("history: write: %w", err)
	}
	return w.err
}

// Flush writes buffered lines to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("history: flush: %w", err)
	}
	return w.err
}

// Close flushes buffered lines and, for a Writer made by Create, syncs and
// closes the file. Close is idempotent: later calls return nil.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.flushLocked()
	if w.file != nil {
		if serr := w.file.Sync(); serr != nil && err == nil {
			err = fmt.Errorf("history: sync: %w", serr)
		}
		if cerr := w.file.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("history: close: %w", cerr)
		}
	}
	return err
}

// MaxLineBytes is the longest history line a Reader accepts.
const MaxLineBytes = 1 << 20

// LineError reports a malformed history line. Err matches ErrInvalid for
// malformed content; for an I/O error it is that error.
type LineError struct {
	// Line is the 1-based line number.
	Line int
	// Err is what is wrong with the line.
	Err error
}

// Error implements error.
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns e.Err.
func (e *LineError) Unwrap() error { return e.Err }

// Reader decodes and validates a history line by line. Blank lines are
// skipped. A Reader is not safe for concurrent use.
type Reader struct {
	sc   *bufio.Scanner
	line int
	err  error
}

// NewReader returns a Reader of the history in r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	return &Reader{sc: sc}
}

// Next returns the next op. It returns io.EOF after the last one and a
// *LineError for a malformed line or a read error; after an error, Next
// keeps returning it.
func (r *Reader) Next() (Op, error) {
	if r.err != nil {
		return Op{}, r.err
	}
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		op, err := Decode(b)
		if err != nil {
			r.err = &LineError{Line: r.line, Err: err}
			return Op{}, r.err
		}
		return op, nil
	}
	switch err := r.sc.Err(); {
	case err == nil:
		r.err = io.EOF
	case errors.Is(err, bufio.ErrTooLong):
		r.err = &LineError{Line: r.line + 1, Err: fmt.Errorf("%w: line longer than %d bytes", ErrInvalid, MaxLineBytes)}
	default:
		r.err = &LineError{Line: r.line + 1, Err: fmt.Errorf("history: read: %w", err)}
	}
	return Op{}, r.err
}

// ReadAll reads every op of the history in r. It stops at the first
// malformed line and returns its *LineError.
func ReadAll(r io.Reader) ([]Op, error) {
	hr := NewReader(r)
	var ops []Op
	for {
		op, err := hr.Next()
		if errors.Is(err, io.EOF) {
			return ops, nil
		}
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
}

// ReadFile reads and validates the history file at path; errors name the
// file and, for malformed content, wrap a *LineError.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	ops, err := ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("history: %s: %w", path, err)
	}
	return ops, nil
}
