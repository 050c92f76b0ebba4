package kubectlgpud

import (
	"fmt"
	"slices"
	"strconv"
)

func itoa(i int) string { return strconv.Itoa(i) }

// atoiBounded parses a small non-negative count (a label value).
func atoiBounded(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<16 {
		return 0, fmt.Errorf("count %q: want 0 to %d", s, 1<<16)
	}
	return n, nil
}

func joinNonEmpty(a, b, sep string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + sep + b
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// bytesGi formats bytes as GiB: "20Gi", or one decimal ("79.6Gi"), or MiB
// below 1 GiB.
func bytesGi(b int64) string {
	const gi, mi = 1 << 30, 1 << 20
	switch {
	case b%gi == 0:
		return strconv.FormatInt(b/gi, 10) + "Gi"
	case b < gi:
		return strconv.FormatInt((b+mi-1)/mi, 10) + "Mi"
	}
	return strconv.FormatFloat(float64(b)/gi, 'f', 1, 64) + "Gi"
}
