// Package gputel is the one form GPU telemetry takes on its way from the
// stream server to a placement decision: each node's newest streamed
// state (health, measured memory and SM use, memory per claim and per
// pod). pkg/stream fills it, pkg/scheduler attributes pods' memory to
// their claims in it, and plan.Snapshot and view read it, so a sample
// keeps one shape from the wire to the decision, and anything that can
// build it (a replay, a test) feeds the same decide code.
//
// It imports nothing of the module's: a leaf every side can share.
package gputel

import "time"

// Node is the newest state one node's agent streamed.
type Node struct {
	// Received is when the newest sample or event from the node arrived.
	Received time.Time
	// Interval is the agent's sampling interval (--stream-interval).
	Interval time.Duration
	// Devices are the node's GPUs and MIG devices by UUID (the
	// ResourceSlice devices' "uuid" attribute).
	Devices map[string]Device
}

// Device is one GPU's or MIG device's newest state.
type Device struct {
	// Unhealthy is set from the moment the agent reports an Xid, an ECC
	// error, GPU lost or a health change to unhealthy, until it reports
	// the device healthy again (or says hello anew).
	Unhealthy bool
	// HealthReason says why ("Xid 79", "double-bit ECC", "GPU lost").
	HealthReason string
	// MemoryUsedBytes is the device memory in use as measured (all
	// processes); MemoryTotalBytes is the device's memory. Zero before
	// the first sample.
	MemoryUsedBytes, MemoryTotalBytes uint64
	// SMUtilPercent is the measured SM (or GPU) utilization, 0-100.
	SMUtilPercent float64
	// ClaimMemoryBytes is measured memory per ResourceClaim UID on a
	// shared GPU or MIG device, where it can be attributed: what the
	// agent reported, plus (in the scheduler) the memory of pods holding
	// exactly one claim on the node.
	ClaimMemoryBytes map[string]uint64
	// PodMemoryBytes is the memory of processes the agent attributed to
	// pods, by pod UID.
	PodMemoryBytes map[string]uint64
}
