package adminapi

import (
	"errors"
	"fmt"
)

// Sentinel errors; the typed errors below map onto them with Is.
var (
	// ErrNoAgent is returned when no agent listens on the socket: there is
	// no socket file, or nothing accepts on it. It is the one failure after
	// which a CLI may safely act without the agent.
	ErrNoAgent = errors.New("adminapi: no agent is listening")
	// ErrAgentClosed is wrapped when the agent closed the connection
	// before answering (it stopped or crashed mid-request).
	ErrAgentClosed = errors.New("adminapi: the agent closed the connection before answering")
	// ErrBadBody is wrapped by every request-body decoding error.
	ErrBadBody = errors.New("adminapi: bad request body")
	// ErrNotSocket is returned when the socket path holds something other
	// than a socket; the server refuses to remove it.
	ErrNotSocket = errors.New("adminapi: not a socket")
)

// AgentClosedError is a call the agent accepted and then dropped without an
// answer: whatever it asked for may or may not have happened.
type AgentClosedError struct {
	// Socket is the agent's socket path.
	Socket string
	// Err is the transport error (io.EOF, ECONNRESET, ...).
	Err error
}

func (e *AgentClosedError) Error() string {
	return fmt.Sprintf("the agent at %s closed the connection before answering: check the agent's log; the change may or may not have been applied", e.Socket)
}

func (e *AgentClosedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrAgentClosed) true.
func (e *AgentClosedError) Is(target error) bool { return target == ErrAgentClosed }
