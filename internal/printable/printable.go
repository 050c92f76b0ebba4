// Package printable makes user-supplied text safe to echo in an error
// message or a log: quoted and cut when it is binary or runaway, as it is
// when it is plain text.
package printable

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxQuoted bounds the bytes of user-supplied text one message echoes.
const MaxQuoted = 200

// Quote quotes s (%q), cut to MaxQuoted bytes with "..." after the cut.
func Quote(s string) string {
	if len(s) > MaxQuoted {
		return fmt.Sprintf("%q...", s[:MaxQuoted])
	}
	return fmt.Sprintf("%q", s)
}

// Text returns s as it is when it is printable text (newlines and tabs
// allowed), and otherwise Quote(s), so a binary file never lands raw in a
// terminal or a log.
func Text(s string) string {
	if !utf8.ValidString(s) {
		return Quote(s)
	}
	for _, r := range s {
		if (r < ' ' && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return Quote(s)
		}
	}
	return s
}

// Lines applies Text to each line of a message, so one binary part of a
// joined error does not hide the others.
func Lines(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = Text(l)
	}
	return strings.Join(lines, "\n")
}
