package trace

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

const (
	nodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n"
	podHeader  = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)

// TestReadBounds shows each bad value the issue names as an error at its
// file, line and column, read before any memory is sized by it.
func TestReadBounds(t *testing.T) {
	tests := []struct {
		name string
		read func(io.Reader, string) error
		csv  string
		want string
	}{
		{"huge gpu count", readNodes, nodeHeader + "n0,64000,262144,1000000000,P100\n", "f.csv:2: column gpu: 1000000000 outside 0..64"},
		{"64000 gpus", readNodes, nodeHeader + "n0,64000,262144,8,P100\nn1,1,1,64000,P100\n", "f.csv:3: column gpu: 64000 outside 0..64"},
		{"negative node cpu", readNodes, nodeHeader + "n0,-1,262144,8,P100\n", "f.csv:2: column cpu_milli: -1 outside"},
		{"negative node memory", readNodes, nodeHeader + "n0,1,-1,8,P100\n", "f.csv:2: column memory_mib: -1 outside"},
		{"huge node memory", readNodes, nodeHeader + "n0,1,9223372036854775807,8,P100\n", "f.csv:2: column memory_mib"},
		{"header-only node list", readNodes, nodeHeader, "f.csv:1: no rows after the header"},
		{"empty node list", readNodes, "", "f.csv:1: header: EOF"},
		{"negative pod cpu", readPods, podHeader + "p0,-5,1,1,1000,,LS,Running,0,1,0\n", "f.csv:2: column cpu_milli: -5 outside"},
		{"negative pod gpus", readPods, podHeader + "p0,5,1,-1,1000,,LS,Running,0,1,0\n", "f.csv:2: column num_gpu: -1 outside"},
		{"huge pod gpus", readPods, podHeader + "p0,5,1,100000,1000,,LS,Running,0,1,0\n", "f.csv:2: column num_gpu: 100000 outside"},
		{"negative creation", readPods, podHeader + "p0,5,1,1,1000,,LS,Running,-3,1,0\n", "f.csv:2: column creation_time"},
		{"header-only pod list", readPods, podHeader, "f.csv:1: no rows after the header"},
		{"long record", readPods, podHeader + "p0," + strings.Repeat("1", MaxRecordBytes) + ",1,1,1000,,LS,Running,0,1,0\n", "f.csv:2: record longer than"},
		{"long quoted record", readPods, podHeader + `"p0` + strings.Repeat("\n", MaxRecordBytes) + "\"\n", "longer than"},
		{"binary value is cut in the message", readPods, podHeader + "p0,\x00\x01" + strings.Repeat("\xff", 200) + ",1,1,1000,,LS,Running,0,1,0\n", `f.csv:2: column cpu_milli: not an integer: "\x00\x01\xff`},
		{"long header", readPods, strings.Repeat("x", MaxRecordBytes+1), "f.csv:1: header: record longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.read(strings.NewReader(tc.csv), "f.csv")
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReadRowsTooMany(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a million rows")
	}
	rows := io.MultiReader(strings.NewReader(nodeHeader), &repeatReader{line: []byte("n,1,1,1,T4\n"), n: MaxRows + 1})
	_, err := ReadNodes(rows, "f.csv")
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "more than 1000000 rows") {
		t.Fatalf("err = %v", err)
	}
}

// repeatReader yields line n times.
type repeatReader struct {
	line []byte
	n    int
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	w := 0
	for w < len(p) {
		if r.n == 0 {
			if w == 0 {
				return 0, io.EOF
			}
			break
		}
		c := copy(p[w:], r.line[r.off:])
		w += c
		if r.off += c; r.off == len(r.line) {
			r.off, r.n = 0, r.n-1
		}
	}
	return w, nil
}

func readNodes(r io.Reader, name string) error { _, err := ReadNodes(r, name); return err }
func readPods(r io.Reader, name string) error  { _, err := ReadPods(r, name); return err }

// checkParsed is what every fuzzed read must hold to: an error names the
// file, and every value read lies within the bounds.
func checkParsed(t *testing.T, err error) {
	t.Helper()
	if err != nil && (!errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "f.csv:")) {
		t.Fatalf("error %q is not a *RowError naming f.csv", err)
	}
}

func FuzzReadNodes(f *testing.F) {
	for _, s := range []string{
		nodeHeader + "n0,32000,1024,0,nan\nn1,96000,2048,8,V100M32\n",
		nodeHeader + "n0,64000,262144,1000000000,P100\n",
		nodeHeader + "n0,-1,262144,8,P100\n",
		nodeHeader,
		"\ufeffsn,cpu_milli,memory_mib,gpu,model\n\"n\n0\",1,1,1,T4\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nodes, err := ReadNodes(strings.NewReader(s), "f.csv")
		checkParsed(t, err)
		if err != nil {
			return
		}
		for _, n := range nodes {
			if n.NumGPU < 0 || n.NumGPU > MaxGPUsPerNode || n.CPUMilli < 0 || n.CPUMilli > MaxCPUMilli || n.MemoryMiB < 0 || n.MemoryMiB > MaxMemoryMiB {
				t.Fatalf("node out of bounds: %+v", n)
			}
		}
	})
}

func FuzzReadPods(f *testing.F) {
	for _, s := range []string{
		podHeader + "p0,1000,100,1,500,,LS,Running,0,10,0\np1,2000,100,2,1000,V100M16|V100M32,BE,Failed,1,,1\n",
		podHeader + "p0,-5,1,1,1000,,LS,Running,0,1,0\n",
		podHeader + "p0,5,1,64000,1000,,LS,Running,0,1,0\n",
		podHeader + "p0,5,1,2,500,,LS,Running,0,1,0\n",
		podHeader,
		"name,cpu_milli\np0,1\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pods, err := ReadPods(strings.NewReader(s), "f.csv")
		checkParsed(t, err)
		if err != nil {
			return
		}
		for _, p := range pods {
			if p.NumGPU < 0 || p.NumGPU > MaxGPUsPerNode || p.GPUMilli < 0 || p.GPUMilli > 1000 || p.CPUMilli < 0 || p.MemoryMiB < 0 ||
				p.CreationTime < 0 || p.CreationTime > MaxSeconds || p.DeletionTime < 0 || p.DeletionTime > MaxSeconds {
				t.Fatalf("pod out of bounds: %+v", p)
			}
		}
	})
}

func TestBinaryValueMessageIsShort(t *testing.T) {
	_, err := ReadPods(strings.NewReader(podHeader+"p0,"+strings.Repeat("\xff", 1000)+",1,1,1000,,LS,Running,0,1,0\n"), "f.csv")
	if err == nil || len(err.Error()) > 250 {
		t.Fatalf("err = %v (%d bytes), want a short error", err, len(err.Error()))
	}
}

func TestReadNodesClusterGPUs(t *testing.T) {
	n := MaxClusterGPUs/MaxGPUsPerNode + 1
	rows := io.MultiReader(strings.NewReader(nodeHeader), &repeatReader{line: []byte("n,1,1,64,T4\n"), n: n})
	_, err := ReadNodes(rows, "f.csv")
	want := "f.csv:" + strconv.Itoa(n+1) + ": column gpu: the node list passes 1048576 GPUs"
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}
