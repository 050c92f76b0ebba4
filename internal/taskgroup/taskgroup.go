// Package taskgroup runs a process's long-running parts together: all
// start at once, the first error stops the others. It is the one runner of
// `gpud agent`'s components and `gpud scheduler`'s servers.
package taskgroup

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// Task is one long-running part of a process.
type Task struct {
	// Name prefixes the task's error ("name: err"); empty returns the
	// error as it is.
	Name string
	// Run runs until its ctx ends (and returns nil then) or it fails. A
	// Run that returns nil early ends alone, the others run on; one that
	// should stop the others returns context.Canceled.
	Run func(ctx context.Context) error
}

// Run starts every task at once and waits for all of them. The first
// error cancels the context of the others and is returned, named by its
// task. Run returns nil when every task ended without an error or when
// the first error is (or wraps) context.Canceled: the process was asked
// to stop.
func Run(ctx context.Context, tasks []Task) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, t := range tasks {
		g.Go(func() error {
			err := t.Run(ctx)
			if err != nil && t.Name != "" {
				return fmt.Errorf("%s: %w", t.Name, err)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
