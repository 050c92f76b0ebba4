package telemetryv1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// protocVersion is the generated files' "protoc vX" header line: the one
// part that depends on the machine's protoc rather than on the sources.
var protocVersion = regexp.MustCompile(`(?m)^//( -)?\s*protoc\s+v\S+$`)

// TestGeneratedCodeIsCurrent regenerates the Go code from telemetry.proto
// into a temporary directory (hack/proto.sh, the `make proto` script) and
// fails when the checked-in files differ: run `make proto` and commit.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("GPUD_REQUIRE_PROTOC") != "" {
			t.Fatalf("protoc not found with GPUD_REQUIRE_PROTOC set: %v", err)
		}
		t.Skip("protoc not found (apt-get install protobuf-compiler)")
	}
	if testing.Short() {
		t.Skip("builds the protoc plugins")
	}
	out := t.TempDir()
	cmd := exec.Command("../../../hack/proto.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/proto.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"telemetry.pb.go", "telemetry_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, "api/telemetry/v1", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(protocVersion.ReplaceAll(got, nil), protocVersion.ReplaceAll(want, nil)) {
			t.Errorf("%s is stale: run `make proto` and commit the result", name)
		}
	}
}
