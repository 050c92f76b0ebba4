package podresources_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/test/kubeletstub"
)

// serve starts a fake kubelet PodResources API and returns its socket.
func serve(t *testing.T, resp *podresourcesv1.ListPodResourcesResponse) (string, *kubeletstub.PodResources) {
	t.Helper()
	k, err := kubeletstub.StartPodResources(resp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k.Socket(), k
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

// TestAllocations checks the one rule the MIG service and the sharing
// runtime share: no socket means no kubelet and nothing allocated; a
// socket nobody answers on is an error, since then nobody can tell.
func TestAllocations(t *testing.T) {
	missing := podresources.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	t.Cleanup(func() { _ = missing.Close() })
	if as, err := missing.Allocations(t.Context()); err != nil || len(as) != 0 {
		t.Fatalf("Allocations() without a socket = %v, %v; want none and no error", as, err)
	}
	if _, err := missing.List(t.Context()); !errors.Is(err, podresources.ErrNoKubelet) {
		t.Fatalf("List() without a socket = %v, want ErrNoKubelet", err)
	}
	// A file where the socket should be: a kubelet that does not answer.
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dead := podresources.New(sock)
	t.Cleanup(func() { _ = dead.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := dead.Allocations(ctx); !errors.Is(err, podresources.ErrUnavailable) || errors.Is(err, podresources.ErrNoKubelet) {
		t.Fatalf("Allocations() on a dead socket = %v, want ErrUnavailable (not ErrNoKubelet)", err)
	}
}
