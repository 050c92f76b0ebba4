package kubeletstub

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources is a fake kubelet PodResources API v1 on a real unix socket:
// List answers the response last given to Set.
type PodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	dir  string
	srv  *grpc.Server
	mu   sync.Mutex
	resp *podresourcesv1.ListPodResourcesResponse
}

// StartPodResources serves resp on a new socket in a fresh short temp dir
// (unix socket paths are limited to 107 bytes). Stop removes it.
func StartPodResources(resp *podresourcesv1.ListPodResourcesResponse) (*PodResources, error) {
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		return nil, fmt.Errorf("kubeletstub: %w", err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("kubeletstub: listen: %w", err)
	}
	p := &PodResources{dir: dir, srv: grpc.NewServer(), resp: resp}
	podresourcesv1.RegisterPodResourcesListerServer(p.srv, p)
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Socket is the path to dial.
func (p *PodResources) Socket() string { return filepath.Join(p.dir, "kubelet.sock") }

// Set replaces the response List returns.
func (p *PodResources) Set(resp *podresourcesv1.ListPodResourcesResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resp = resp
}

// List implements the PodResources API.
func (p *PodResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resp, nil
}

// Stop stops serving, as a kubelet that went away, and removes the socket.
func (p *PodResources) Stop() {
	p.srv.Stop()
	_ = os.RemoveAll(p.dir)
}

// DRAContainer is a container that uses devices of one DRA claim, as a
// kubelet with KubeletPodResourcesDynamicResources (on by default from
// 1.34) reports it; each device gets one CDI device named
// <driver>/claim=<claim>-<device>.
func DRAContainer(name, claimNamespace, claimName, driver, pool string, devices ...string) *podresourcesv1.ContainerResources {
	dr := &podresourcesv1.DynamicResource{ClaimName: claimName, ClaimNamespace: claimNamespace}
	for _, d := range devices {
		dr.ClaimResources = append(dr.ClaimResources, &podresourcesv1.ClaimResource{
			DriverName: driver, PoolName: pool, DeviceName: d,
			CdiDevices: []*podresourcesv1.CDIDevice{{Name: driver + "/claim=" + claimName + "-" + d}},
		})
	}
	return &podresourcesv1.ContainerResources{Name: name, DynamicResources: []*podresourcesv1.DynamicResource{dr}}
}
