package upstreams

import (
	"errors"
	"fmt"
)

// State is the state of an upstream's connection.
type State int

// The states of an upstream. An upstream is Down before Start, Starting while
// a connection attempt runs, Up once initialize and the catalogue fetch have
// succeeded, and Down again when the connection is lost or an attempt fails.
const (
	StateStarting State = iota
	StateUp
	StateDown
)

// String returns "starting", "up" or "down".
func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateUp:
		return "up"
	case StateDown:
		return "down"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ErrUnavailable is wrapped by every error that says an upstream is down,
// restarting or closed; the message names the upstream.
var ErrUnavailable = errors.New("upstream unavailable")

// unavailableError is an error whose message stands alone and which wraps
// ErrUnavailable, and the underlying cause when there is one.
type unavailableError struct {
	msg   string
	cause error
}

func (e *unavailableError) Error() string { return e.msg }

func (e *unavailableError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrUnavailable, e.cause}
	}
	return []error{ErrUnavailable}
}

func unavailable(cause error, format string, args ...any) error {
	return &unavailableError{msg: fmt.Sprintf(format, args...), cause: cause}
}
