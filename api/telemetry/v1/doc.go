// Package telemetryv1 is the generated Go code of the telemetry stream's
// protobuf service (telemetry.proto): agents stream device telemetry and
// health events to the leading scheduler. Regenerate it with `make proto`
// (hack/proto.sh); TestGeneratedCodeIsCurrent fails when it is stale.
package telemetryv1
