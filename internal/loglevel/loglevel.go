// Package loglevel narrows a slog.Handler to a minimum level, for loggers
// of libraries (client-go through klog) whose verbose levels would drown
// the process's own debug output.
package loglevel

import (
	"context"
	"log/slog"
)

// AtLeast returns a handler that passes h the records at level or above
// (and that h itself enables); the rest are dropped.
func AtLeast(h slog.Handler, level slog.Level) slog.Handler { return minLevel{h, level} }

// minLevel is a slog.Handler that drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

var _ slog.Handler = minLevel{}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(a), h.min}
}

func (h minLevel) WithGroup(g string) slog.Handler { return minLevel{h.Handler.WithGroup(g), h.min} }
