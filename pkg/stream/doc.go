// Package stream is the telemetry stream between gpud agents and the
// leading gpud scheduler (api/telemetry/v1): the agent's [Client], which
// keeps a bounded queue of samples and events and one reconnecting gRPC
// stream, and the scheduler's [Server], which accepts agents over mutual
// TLS, proves each stream's node with the agent's bearer token through an
// [Authenticator], bounds and validates what it receives, and keeps the
// newest state per node as gputel.Node. [Certs] loads the
// certificate files of either end and reloads them when they change.
//
// The client certificate proves a gpud agent, not its node (every agent
// may hold the same one); the node is the token's to prove. Package
// tokenauth is the Kubernetes Authenticator (TokenReview of the agent
// pod's projected ServiceAccount token).
//
// It must not import NVML, client-go or the scheduler runtime: the agent
// and the scheduler feed it through small functions, and tokenauth alone
// imports client-go.
package stream
