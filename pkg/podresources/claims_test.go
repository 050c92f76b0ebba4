package podresources_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/test/kubeletstub"
)

// TestListResources: a kubelet reporting DRA claims' devices per container
// (dynamic_resources) next to device plugin devices, over real gRPC.
func TestListResources(t *testing.T) {
	share := "0b5e"
	mixed := kubeletstub.DRAContainer("cuda", "ml", "train-gpu", "gpu.gpud.io", "node-a", "gpu-2", "gpu-3-mig-1g10gb-4")
	mixed.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: "example.com/nic", DeviceIds: []string{"nic-0"}}}
	frac := kubeletstub.DRAContainer("infer", "web", "shared", "gpu.gpud.io", "node-a", "gpu-0")
	frac.DynamicResources[0].ClaimResources[0].ShareId = &share
	sock, _ := serve(t, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "train", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{mixed, {Name: "sidecar"}}},
		{Name: "server", Namespace: "web", Containers: []*podresourcesv1.ContainerResources{frac}},
	}})
	c := podresources.New(sock)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := c.ListResources(ctx)
	if err != nil {
		t.Fatalf("ListResources() error = %v", err)
	}
	want := podresources.Resources{
		Assignments: []podresources.Assignment{{Namespace: "ml", Pod: "train", Container: "cuda", ResourceName: "example.com/nic", DeviceIDs: []string{"nic-0"}}},
		Claims: []podresources.ClaimDevice{
			{Namespace: "ml", Pod: "train", Container: "cuda", ClaimNamespace: "ml", ClaimName: "train-gpu", Driver: "gpu.gpud.io", Pool: "node-a",
				Device: "gpu-2", CDIDevices: []string{"gpu.gpud.io/claim=train-gpu-gpu-2"}},
			{Namespace: "ml", Pod: "train", Container: "cuda", ClaimNamespace: "ml", ClaimName: "train-gpu", Driver: "gpu.gpud.io", Pool: "node-a",
				Device: "gpu-3-mig-1g10gb-4", CDIDevices: []string{"gpu.gpud.io/claim=train-gpu-gpu-3-mig-1g10gb-4"}},
			{Namespace: "web", Pod: "server", Container: "infer", ClaimNamespace: "web", ClaimName: "shared", Driver: "gpu.gpud.io", Pool: "node-a",
				Device: "gpu-0", ShareID: share, CDIDevices: []string{"gpu.gpud.io/claim=shared-gpu-0"}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListResources() =\n%+v\nwant\n%+v", got, want)
	}
	// List itself is unchanged: device plugin assignments only.
	as, err := c.List(ctx)
	if err != nil || !reflect.DeepEqual(as, want.Assignments) {
		t.Errorf("List() = %+v, %v; want %+v", as, err, want.Assignments)
	}
}

func TestListResourcesUnavailable(t *testing.T) {
	c := podresources.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.ListResources(t.Context()); !errors.Is(err, podresources.ErrUnavailable) {
		t.Fatalf("ListResources() without a kubelet = %v, want ErrUnavailable", err)
	}
}
