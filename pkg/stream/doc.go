// Package stream is the telemetry stream between gpud agents and the
// leading gpud scheduler (api/telemetry/v1): the agent's [Client], which
// keeps a bounded queue of samples and events and one reconnecting gRPC
// stream, and the scheduler's [Server], which authenticates each agent
// with mutual TLS, bounds and validates what it receives, and keeps the
// newest state per node as plan.NodeTelemetry. [Certs] loads the
// certificate files of either end and reloads them when they change.
//
// It must not import NVML, client-go or the scheduler runtime: the agent
// and the scheduler feed it through small functions.
package stream
