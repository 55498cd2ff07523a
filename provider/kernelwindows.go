package main

import (
	"os"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Kernel windows (opt-in, XDPFAB_KERNEL_WINDOWS=1): fi_mr_reg and
// fi_mr_regattr put a registration in the kernel when they can, so that
// remote atomics on it are executed by the XDP program (a kernel-resident
// region, fabric.Domain.MRRegKernelAt) instead of the provider's user-space
// target. This is how an unmodified MPI's one-sided windows get served in
// the kernel: Open MPI 4.1's osc rdma allocates an MPI_Win_allocate window
// (with its state) with calloc and registers it through btl ofi, whose
// registration cache rounds it out to whole pages; a window of 128 KiB or
// more is then an mmap of its own, private anonymous memory that nothing
// else registers.
//
// A registration is adopted only if it is one buffer of whole pages of
// private anonymous memory on an AF_XDP domain, with remote read or write
// access, no flags, no offset and no auth key; anything else, or any
// failure to adopt, is registered in place as without the variable.

// kernelWindows is read once, when the provider is loaded.
var kernelWindows = os.Getenv("XDPFAB_KERNEL_WINDOWS") == "1"

// adoptKernelWindow registers a as a kernel-resident region if kernel
// windows are on and a can be one; nil if not.
func adoptKernelWindow(pd *provDomain, a *mr.Attr, flags fi.Flags) *mr.MR {
	if !kernelWindows || len(a.IOV) != 1 || flags != 0 || a.Offset != 0 || a.Iface != mr.HMEMSystem ||
		len(a.AuthKey) != 0 || a.Access&(fi.REMOTE_READ|fi.REMOTE_WRITE) == 0 {
		return nil
	}
	m, err := pd.d.MRRegKernelAt(a.IOV[0], a.Access, 0, a.RequestedKey, 0, a.Context)
	if err != nil {
		return nil
	}
	return m
}
