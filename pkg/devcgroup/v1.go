package devcgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// V1Handle is the cgroup v1 form of the filter: lines written to a devices
// controller cgroup's devices.deny (and, where the runtime allowed a whole
// major, devices.allow for the allocated minors). Close writes back what it
// removed. It only narrows: it never adds an exception the cgroup did not
// have. A V1Handle is safe for concurrent use.
type V1Handle struct {
	dir string

	mu      sync.Mutex
	allowed Allowed
	undo    []v1Write
	closed  bool
}

// v1Write is one line written to devices.allow or devices.deny.
type v1Write struct {
	file string // "devices.allow" or "devices.deny"
	line string
}

// V1Node is what the v1 form needs to know of the node, since v1 rules
// name devices one by one.
type V1Node struct {
	// GPUMinors are every GPU minor on the node; the rest of 0..254
	// (nvidia-modeset among them) is refused too.
	GPUMinors []uint32
}

// AttachV1 narrows the devices cgroup v1 directory dir to a. It reads
// devices.list: a cgroup that allows everything ("a *:* rwm", a
// privileged container) gets one deny line per refused device; a cgroup
// with a list of exceptions (every runc container) loses the exceptions
// that cover refused devices, and a whole-major exception ("c 195:* rwm")
// is replaced by the allowed minors.
func AttachV1(dir string, a Allowed, node V1Node) (*V1Handle, error) {
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("devcgroup: %s: %w", dir, err)
	}
	h := &V1Handle{dir: dir, allowed: a.Normalize()}
	if err := h.apply(a.Normalize(), node); err != nil {
		_ = h.revert()
		return nil, err
	}
	return h, nil
}

// refused lists the minors of major that a refuses: for 195, 0..254 but
// the allowed; for caps, every cap of the node's GPUs but the allowed.
func refused(a Allowed, node V1Node) map[uint32][]uint32 {
	out := map[uint32][]uint32{}
	for m := range uint32(CtlMinor) {
		if !slices.Contains(a.GPUMinors, m) {
			out[GPUMajor] = append(out[GPUMajor], m)
		}
	}
	if a.CapsMajor != 0 {
		maxGPU := 0
		for _, g := range node.GPUMinors {
			maxGPU = max(maxGPU, int(g))
		}
		for m := uint32(1); m <= CapMinor(maxGPU, 14, 7); m++ {
			if !slices.Contains(a.CapMinors, m) {
				out[a.CapsMajor] = append(out[a.CapsMajor], m)
			}
		}
	}
	return out
}

func (h *V1Handle) apply(a Allowed, node V1Node) error {
	list, err := readV1List(h.dir)
	if err != nil {
		return err
	}
	deny := refused(a, node)
	if slices.Contains(list, "a *:* rwm") {
		for _, major := range sortedKeys(deny) {
			for _, m := range deny[major] {
				line := fmt.Sprintf("c %d:%d rwm", major, m)
				if err := h.write("devices.deny", line, v1Write{"devices.allow", line}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, ex := range list {
		typ, major, minor, access, ok := parseV1Line(ex)
		if !ok || (typ != "c" && typ != "a") {
			continue
		}
		minors, filtered := deny[major]
		if !filtered {
			continue
		}
		if minor == "*" {
			if err := h.write("devices.deny", ex, v1Write{"devices.allow", ex}); err != nil {
				return err
			}
			keep := a.GPUMinors
			if major != GPUMajor {
				keep = a.CapMinors
			} else {
				keep = append(slices.Clone(keep), CtlMinor)
			}
			for _, m := range keep {
				line := fmt.Sprintf("c %d:%d %s", major, m, access)
				if err := h.write("devices.allow", line, v1Write{"devices.deny", line}); err != nil {
					return err
				}
			}
			continue
		}
		n, err := strconv.ParseUint(minor, 10, 32)
		if err == nil && slices.Contains(minors, uint32(n)) {
			if err := h.write("devices.deny", ex, v1Write{"devices.allow", ex}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h *V1Handle) write(file, line string, undo v1Write) error {
	p := filepath.Join(h.dir, file)
	if err := os.WriteFile(p, []byte(line), 0); err != nil {
		return fmt.Errorf("devcgroup: write %q to %s: %w (is %s a devices cgroup v1 directory?)", line, p, err, h.dir)
	}
	h.undo = append(h.undo, undo)
	return nil
}

// revert writes the undo lines in reverse order.
func (h *V1Handle) revert() error {
	var errs []error
	for i := len(h.undo) - 1; i >= 0; i-- {
		u := h.undo[i]
		p := filepath.Join(h.dir, u.file)
		if err := os.WriteFile(p, []byte(u.line), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("devcgroup: restore %q to %s: %w", u.line, p, err))
		}
	}
	h.undo = nil
	return errors.Join(errs...)
}

// Dir is the devices cgroup v1 directory.
func (h *V1Handle) Dir() string { return h.dir }

// Allowed is the rule in force.
func (h *V1Handle) Allowed() Allowed {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.allowed
}

// Update reverts and reapplies with a; see the comment inside for the
// instant between the two.
func (h *V1Handle) Update(a Allowed, node V1Node) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("devcgroup: update %s: handle closed", h.dir)
	}
	if h.allowed.Equal(a) {
		return nil
	}
	if err := a.Validate(); err != nil {
		return fmt.Errorf("devcgroup: %s: %w", h.dir, err)
	}
	// Give back what the old rule took, then take what the new one
	// refuses: v1 rules are read from devices.list, so the new rule must
	// see the runtime's list. For that instant the cgroup has the
	// runtime's rules only, never more.
	if err := h.revert(); err != nil {
		return err
	}
	if err := h.apply(a.Normalize(), node); err != nil {
		return err
	}
	h.allowed = a.Normalize()
	return nil
}

// Close writes back what the handle removed. A cgroup that is gone is not
// an error. Close is idempotent.
func (h *V1Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	if _, err := os.Stat(h.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return h.revert()
}

func readV1List(dir string) ([]string, error) {
	p := filepath.Join(dir, "devices.list")
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("devcgroup: read %s: %w (is %s a devices cgroup v1 directory?)", p, err, dir)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("devcgroup: read %s: %w", p, err)
	}
	return out, nil
}

// parseV1Line splits "c 195:3 rwm"; major "*" parses as 0 and is skipped
// by the caller through the deny map (no device has major 0).
func parseV1Line(l string) (typ string, major uint32, minor, access string, ok bool) {
	f := strings.Fields(l)
	if len(f) != 3 {
		return "", 0, "", "", false
	}
	ma, mi, found := strings.Cut(f[1], ":")
	if !found {
		return "", 0, "", "", false
	}
	n, err := strconv.ParseUint(ma, 10, 32)
	if err != nil {
		return f[0], 0, mi, f[2], true
	}
	return f[0], uint32(n), mi, f[2], true
}

func sortedKeys(m map[uint32][]uint32) []uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
