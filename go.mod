module github.com/gpud/gpud

go 1.26.0

require (
	github.com/NVIDIA/go-nvlib v0.13.0 // indirect
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/goccy/go-yaml v1.19.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sync v0.25.0 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
