package mr

import (
	"fmt"
	"strings"

	"github.com/xdpfab/xdpfab/fi"
)

// Mode is the domain's mr_mode (fi_domain_attr), bits as in fabric.h.
type Mode uint32

// mr_mode bits.
const (
	ModeUnspec    Mode = 0       // FI_MR_UNSPEC: default (scalable) registration
	ModeBasic     Mode = 1       // FI_MR_BASIC (deprecated): VIRT_ADDR|ALLOCATED|PROV_KEY, set alone
	ModeScalable  Mode = 2       // FI_MR_SCALABLE (deprecated): the default, set alone
	ModeLocal     Mode = 1 << 2  // FI_MR_LOCAL: local buffers need a registered desc
	ModeRaw       Mode = 1 << 3  // FI_MR_RAW: keys are exchanged raw and mapped at the peer
	ModeVirtAddr  Mode = 1 << 4  // FI_MR_VIRT_ADDR: peers address by virtual address
	ModeAllocated Mode = 1 << 5  // FI_MR_ALLOCATED: pages must be backed at registration
	ModeProvKey   Mode = 1 << 6  // FI_MR_PROV_KEY: the provider chooses keys
	ModeMMUNotify Mode = 1 << 7  // FI_MR_MMU_NOTIFY: fi_mr_refresh after page changes
	ModeRMAEvent  Mode = 1 << 8  // FI_MR_RMA_EVENT: FI_RMA_EVENT regions start disabled
	ModeEndpoint  Mode = 1 << 9  // FI_MR_ENDPOINT: regions are enabled per endpoint
	ModeHMEM      Mode = 1 << 10 // FI_MR_HMEM: device buffers need registration

	// modeBits are the non-deprecated bits a Table accepts.
	modeBits = ModeLocal | ModeRaw | ModeVirtAddr | ModeAllocated | ModeProvKey |
		ModeMMUNotify | ModeRMAEvent | ModeEndpoint | ModeHMEM
)

var modeNames = [...]string{
	"FI_MR_BASIC", "FI_MR_SCALABLE", "FI_MR_LOCAL", "FI_MR_RAW", "FI_MR_VIRT_ADDR",
	"FI_MR_ALLOCATED", "FI_MR_PROV_KEY", "FI_MR_MMU_NOTIFY", "FI_MR_RMA_EVENT",
	"FI_MR_ENDPOINT", "FI_MR_HMEM",
}

func (m Mode) String() string {
	if m == 0 {
		return "FI_MR_UNSPEC"
	}
	var names []string
	for i, n := range modeNames {
		if m&(1<<i) != 0 {
			names = append(names, n)
			m &^= 1 << i
		}
	}
	if m != 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(m)))
	}
	return strings.Join(names, "|")
}

// Effective resolves the deprecated encodings to the mode bits they stand
// for: FI_MR_BASIC is FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY and
// FI_MR_SCALABLE is the default (no bits), as fi_mr(3) describes. Both must
// be set alone; anything else, or an unknown bit, is FI_EINVAL.
func (m Mode) Effective() (Mode, error) {
	switch {
	case m == ModeBasic:
		return ModeVirtAddr | ModeAllocated | ModeProvKey, nil
	case m == ModeScalable:
		return 0, nil
	case m&(ModeBasic|ModeScalable) != 0:
		return 0, fmt.Errorf("mr mode %v: FI_MR_BASIC and FI_MR_SCALABLE must be set alone: %w", m, fi.EINVAL)
	case m&^modeBits != 0:
		return 0, fmt.Errorf("mr mode %v: unknown bits: %w", m, fi.EINVAL)
	}
	return m, nil
}

// HMEMIface is enum fi_hmem_iface: the interface that allocated a buffer.
type HMEMIface uint32

// HMEM interfaces. Only HMEMSystem memory can be registered here.
const (
	HMEMSystem    HMEMIface = iota // FI_HMEM_SYSTEM: malloc, mmap, Go's allocator
	HMEMCUDA                       // FI_HMEM_CUDA
	HMEMROCR                       // FI_HMEM_ROCR
	HMEMZE                         // FI_HMEM_ZE
	HMEMNeuron                     // FI_HMEM_NEURON
	HMEMSynapseAI                  // FI_HMEM_SYNAPSEAI
)

var ifaceNames = [...]string{"FI_HMEM_SYSTEM", "FI_HMEM_CUDA", "FI_HMEM_ROCR",
	"FI_HMEM_ZE", "FI_HMEM_NEURON", "FI_HMEM_SYNAPSEAI"}

func (i HMEMIface) String() string {
	if int(i) < len(ifaceNames) {
		return ifaceNames[i]
	}
	return fmt.Sprintf("HMEMIface(%d)", uint32(i))
}
