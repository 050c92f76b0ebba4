package loglevel

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestAtLeast(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(AtLeast(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelInfo)).
		With("component", "client-go").WithGroup("g")
	log.Debug("verbose")
	log.Info("kept", "k", "v")
	out := buf.String()
	if strings.Contains(out, "verbose") || !strings.Contains(out, "msg=kept component=client-go g.k=v") {
		t.Errorf("output %q: want only the info record, with its attributes and group", out)
	}
	buf.Reset()
	slog.New(AtLeast(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), slog.LevelInfo)).Info("dropped by the inner handler")
	if buf.Len() != 0 {
		t.Errorf("output %q: the inner handler's level still applies", buf.String())
	}
}
