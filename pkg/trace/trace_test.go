package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/openbdata"
)

// dataDir is the shared trace directory relative to this package.
var dataDir = openbdata.Dir()

func TestReadPods(t *testing.T) {
	tests := []struct {
		name     string
		csv      string
		wantN    int
		wantLine int
		wantCol  string
	}{
		{name: "ok", csv: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
			"p0,1000,100,1,500,,LS,Running,0,10,0\np1,2000,100,2,1000,V100M16|V100M32,BE,Failed,1,,1\n", wantN: 2},
		{name: "bad int", csv: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,100,1,500,\np1,x,1,0,0,\n", wantLine: 3, wantCol: "cpu_milli"},
		{name: "milli too big", csv: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,100,1,1500,\n", wantLine: 2, wantCol: "gpu_milli"},
		{name: "shared multi gpu", csv: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,100,2,500,\n", wantLine: 2, wantCol: "gpu_milli"},
		{name: "missing column", csv: "name,cpu_milli\np0,1\n", wantLine: 1, wantCol: "memory_mib"},
		{name: "short row", csv: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,100\n", wantLine: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := ReadPods(strings.NewReader(tc.csv), "pods.csv")
			if tc.wantLine == 0 {
				if err != nil || len(pods) != tc.wantN {
					t.Fatalf("ReadPods() = %d pods, %v; want %d, nil", len(pods), err, tc.wantN)
				}
				return
			}
			var re *RowError
			if !errors.As(err, &re) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("ReadPods() err = %v, want *RowError", err)
			}
			if re.File != "pods.csv" || re.Line != tc.wantLine || re.Column != tc.wantCol {
				t.Fatalf("RowError = %s:%d col %q, want pods.csv:%d col %q", re.File, re.Line, re.Column, tc.wantLine, tc.wantCol)
			}
			if !strings.Contains(err.Error(), "pods.csv:") {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

func TestReadNodes(t *testing.T) {
	nodes, err := ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,1024,0,nan\nn1,96000,2048,8,V100M32\n"), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].Model != "" || nodes[1].NumGPU != 8 || nodes[1].Model != "V100M32" {
		t.Fatalf("ReadNodes() = %+v", nodes)
	}
	if _, err := ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,-1,T4\n"), "nodes.csv"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("negative gpu: err = %v", err)
	}
}

func TestReadShared(t *testing.T) {
	nodesPath := filepath.Join(dataDir, "openb_node_list_gpu_node.csv")
	if _, err := os.Stat(nodesPath); err != nil {
		t.Skipf("trace data absent: %v", err)
	}
	nodes, err := ReadNodesFile(nodesPath)
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.NumGPU
	}
	if len(nodes) != 1213 || gpus != 6212 {
		t.Fatalf("gpu node list: %d nodes, %d GPUs; want 1213, 6212", len(nodes), gpus)
	}
	pods, err := ReadPodsFile(filepath.Join(dataDir, "openb_pod_list_default.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 8152 {
		t.Fatalf("default pod list: %d pods, want 8152", len(pods))
	}
	if got := Workload("/x/openb_pod_list_default.csv"); got != "openb_pod_list_default" {
		t.Fatalf("Workload() = %q", got)
	}
}

// TestReadPodsOptionalColumns reads the published multi-GPU-heavy openb
// lists as they are: five columns, no gpu_spec, and reports what it read.
func TestReadPodsOptionalColumns(t *testing.T) {
	csv := "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,100,4,1000\np1,500,100,1,250\n"
	pods, cols, err := ReadPodsColumns(strings.NewReader(csv), "multi.csv")
	if err != nil {
		t.Fatalf("ReadPodsColumns() err = %v", err)
	}
	if len(pods) != 2 || pods[0].NumGPU != 4 || pods[1].GPUMilli != 250 || pods[0].GPUSpec != "" {
		t.Fatalf("pods = %+v", pods)
	}
	if got, want := strings.Join(cols, ","), "name,cpu_milli,memory_mib,num_gpu,gpu_milli"; got != want {
		t.Fatalf("columns = %s, want %s", got, want)
	}
	// Blank optional values are blank, whether empty or pandas' "nan".
	pods, _, err = ReadPodsColumns(strings.NewReader(strings.Join(PodColumns, ",")+"\np0,1000,100,1,500,,,,,,\np1,1000,100,1,500,nan,nan,nan,nan,NaN,nan\n"), "blank.csv")
	if err != nil {
		t.Fatalf("blank optional values: %v", err)
	}
	for _, p := range pods {
		if p.GPUSpec != "" || p.CreationTime != 0 || p.DeletionTime != 0 || p.ScheduledTime != 0 {
			t.Fatalf("blank optional values read as %+v", p)
		}
	}
	_, cols, err = ReadPodsColumns(strings.NewReader("gpu_spec,name,cpu_milli,memory_mib,num_gpu,gpu_milli,extra\nA100,p0,1,1,1,1000,x\n"), "p.csv")
	if err != nil || strings.Join(cols, ",") != "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec" {
		t.Fatalf("columns = %v, %v; want the known ones in PodColumns order", cols, err)
	}
}
