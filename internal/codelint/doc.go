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
package codelint
