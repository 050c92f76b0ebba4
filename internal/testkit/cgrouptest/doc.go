// Package cgrouptest holds test helpers for tests that run as root against
// the real cgroup2 hierarchy (pkg/enforce, pkg/nriplugin, the agent's
// enforcement test): skipping where that cannot run, test cgroup trees
// removed at cleanup, GPU device nodes, and opening devices from inside a
// cgroup.
package cgrouptest
