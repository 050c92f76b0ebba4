// Package migctl is the agent's MIG controller: it keeps the configured
// layout in place ([Controller]: recovery of an interrupted apply at
// start, the configured layout, and again when the agent config or the
// layout file changes), serves the MIG routes of the admin API ([API]),
// counts applies ([Metrics]), holds the configured layout's state for
// the node labels ([ConfigState]) and describes each apply's layout
// changes for the node's Events ([ReportChanges]).
//
// It runs the one MIG pipeline, [mig.Service], and adds what pkg/mig must
// not import: HTTP, Prometheus, file watching and the node labels' state
// names. It creates no NVML handle: the service comes in built.
package migctl
