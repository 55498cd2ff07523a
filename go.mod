module github.com/xdpfab/xdpfab

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/stretchr/testify v1.12.1
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.43.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

tool github.com/cilium/ebpf/cmd/bpf2go
