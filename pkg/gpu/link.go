package gpu

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// LinkLevel is how two GPUs reach each other, best first. The names are
// nvidia-smi's: NV (NVLink, printed NV<n>), PIX (one PCIe switch), PXB
// (several PCIe switches), PHB (a PCIe host bridge), NODE (host bridges in
// one NUMA node), SYS (across the inter-socket link).
type LinkLevel int

// Link levels, ordered from the closest to the farthest.
const (
	LinkUnknown LinkLevel = iota
	LinkNVLink
	LinkPIX
	LinkPXB
	LinkPHB
	LinkNODE
	LinkSYS
)

var levelNames = map[LinkLevel]string{
	LinkNVLink: "NV", LinkPIX: "PIX", LinkPXB: "PXB", LinkPHB: "PHB", LinkNODE: "NODE", LinkSYS: "SYS",
}

// String returns the nvidia-smi name without a link count.
func (l LinkLevel) String() string {
	if s, ok := levelNames[l]; ok {
		return s
	}
	return "X"
}

// ParseLinkLevel parses PIX, PXB, PHB, NODE, SYS, NV or NV<n>.
func ParseLinkLevel(s string) (LinkLevel, error) {
	if strings.HasPrefix(s, "NV") && s != "NODE" {
		if rest := s[2:]; rest != "" {
			if _, err := strconv.Atoi(rest); err != nil {
				return LinkUnknown, fmt.Errorf("gpu: link level %q: bad NVLink count", s)
			}
		}
		return LinkNVLink, nil
	}
	for l, name := range levelNames {
		if name == s {
			return l, nil
		}
	}
	return LinkUnknown, fmt.Errorf("gpu: unknown link level %q (want NV<n>, PIX, PXB, PHB, NODE or SYS)", s)
}

// Label is the level as nvidia-smi prints it in a matrix cell: NV<n> for
// NVLink, the level name otherwise.
func (l Link) Label() string {
	if l.Level == LinkNVLink {
		return fmt.Sprintf("NV%d", l.NVLinks)
	}
	return l.Level.String()
}

// MarshalJSON writes the level as its name.
func (l LinkLevel) MarshalJSON() ([]byte, error) { return json.Marshal(l.String()) }

// UnmarshalJSON reads a level name.
func (l *LinkLevel) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseLinkLevel(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// linkJSON is the wire form of Link: level carries the NVLink count (NV12).
type linkJSON struct {
	A       string `json:"a"`
	B       string `json:"b"`
	Level   string `json:"level"`
	NVLinks int    `json:"nvlinks"`
}

// MarshalJSON writes level as NV<n> for NVLink, as the contract says.
func (l Link) MarshalJSON() ([]byte, error) {
	return json.Marshal(linkJSON{A: l.A, B: l.B, Level: l.Label(), NVLinks: l.NVLinks})
}

// UnmarshalJSON reads the wire form.
func (l *Link) UnmarshalJSON(b []byte) error {
	var w linkJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	lvl, err := ParseLinkLevel(w.Level)
	if err != nil {
		return err
	}
	*l = Link{A: w.A, B: w.B, Level: lvl, NVLinks: w.NVLinks}
	return nil
}
