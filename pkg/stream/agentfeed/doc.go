// Package agentfeed is the agent side of the telemetry stream: it turns
// the agent's inventory, sharing configuration and sampler snapshots into
// the stream's Hello, Samples and events, and runs the [stream.Client]
// that carries them.
//
// It reads the sampler through [telemetry.DeviceSnapshot]'s typed
// accessors, never by metric name. It sits beside package stream rather
// than in it because package telemetry imports NVML, which stream must not.
package agentfeed
