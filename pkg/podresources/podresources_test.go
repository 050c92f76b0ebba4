package podresources_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/pkg/podresources"
)

// fakeKubelet serves a fixed List response.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	resp *podresourcesv1.ListPodResourcesResponse
}

func (f *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return f.resp, nil
}

// serve starts a fake kubelet on a short unix socket path and returns the path.
func serve(t *testing.T, resp *podresourcesv1.ListPodResourcesResponse) (string, *grpc.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &fakeKubelet{resp: resp})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock, srv
}

func TestList(t *testing.T) {
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "train-0", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-a", "GPU-b"}},
			}},
			{Name: "sidecar"}, // no devices: left out
		}},
		{Name: "infer", Namespace: "web", Containers: []*podresourcesv1.ContainerResources{
			{Name: "server", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/gpu.shared", DeviceIds: []string{"GPU-c::3"}},
				{ResourceName: "nvidia.com/mig-1g.10gb", DeviceIds: []string{"MIG-d"}},
				{ResourceName: "example.com/empty"},
			}},
		}},
	}}
	sock, _ := serve(t, resp)
	c := podresources.New(sock)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := c.List(ctx)
	if err != nil {
		t.Fatalf("List() error = %v", err)
	}
	want := []podresources.Assignment{
		{Namespace: "ml", Pod: "train-0", Container: "trainer", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{"GPU-a", "GPU-b"}},
		{Namespace: "web", Pod: "infer", Container: "server", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{"GPU-c::3"}},
		{Namespace: "web", Pod: "infer", Container: "server", ResourceName: "nvidia.com/mig-1g.10gb", DeviceIDs: []string{"MIG-d"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestListUnavailable(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) string
	}{
		{name: "missing socket", setup: func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "kubelet.sock")
		}},
		{name: "kubelet stopped", setup: func(t *testing.T) string {
			sock, srv := serve(t, &podresourcesv1.ListPodResourcesResponse{})
			srv.Stop()
			return sock
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := podresources.New(tc.setup(t))
			t.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err := c.List(ctx)
			if !errors.Is(err, podresources.ErrUnavailable) {
				t.Fatalf("List() error = %v, want ErrUnavailable", err)
			}
		})
	}
}

func TestDefaultSocket(t *testing.T) {
	if got := podresources.New("").Socket(); got != podresources.DefaultSocket {
		t.Errorf("New(\"\").Socket() = %q, want %q", got, podresources.DefaultSocket)
	}
}
