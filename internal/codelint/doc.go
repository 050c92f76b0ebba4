// Package codelint holds repository-wide checks of the house rules that
// go vet and staticcheck do not know, as tests over the module's source.
//
// The error-prefix rule: a message names a package at most once. A
// package's sentinel errors carry its prefix ("mig: slice in use"); an
// error that wraps one of them puts the sentinel first and adds its
// context after it (fmt.Errorf("%w: destroy %s", ErrBusy, uuid) gives
// "mig: slice in use: destroy MIG-..."), instead of starting with the
// prefix again; and a sentinel that only ever appears wrapped by another
// sentinel of its package carries no prefix of its own.
//
// The cmd-wires rule: cmd/gpud parses flags, builds components and runs
// them; behaviour lives in packages. So every type its non-test files
// declare with methods is a flag option struct: a struct (or a flag
// value) whose methods are only flag.Value's String and Set,
// flag.Getter's Get, the bool-flag marker IsBoolFlag, register (binds
// its fields to a *flag.FlagSet) and validate (checks the values it
// holds, touching nothing). Anything else (an HTTP server, a CLI
// command's logic, a loader, an error type, a component builder) goes
// into the package that owns it, with its own Config or Options and
// Validate there. Types without methods (the parsed config, the
// wiring's dependency bundles) and test files are not checked.
//
// The layer rules: internal/testkit/... holds test kits (fakes, polling,
// the promtool check), imported only by _test.go files, test/ and other
// kits, so no binary links a test helper; the rest of internal/ is below
// pkg/ (small helpers pkg/ builds on) and imports no pkg/ package, so
// that dependencies point one way.
package codelint
