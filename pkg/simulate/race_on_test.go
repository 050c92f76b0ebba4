//go:build race

package simulate

// raceDetector is true in a -race build: see skipReplaysUnderRace.
const raceDetector = true
