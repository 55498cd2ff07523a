package afxdp

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath/xsk"
)

// Taking an interface's queues. The kernel lets one AF_XDP socket bind a
// queue, and binding fails with EBUSY for two reasons a process cannot
// tell apart from the error:
//
//   - Another process holds the queue (two processes of one namespace on
//     one NIC, as fabtests' fi_rdm_shared_av forks, or MPI ranks sharing
//     a node). Its endpoints should take the kernel socket at once.
//   - A socket closed just before still has the queue: closing takes it
//     off at once, but the kernel releases the queue's buffer pool later,
//     from a workqueue that needs the RTNL lock. That is ~0.4 s on an idle
//     veth, and seconds while other processes create and destroy network
//     namespaces (they hold RTNL meanwhile), as a test suite or a container
//     host does. A process that starts right after another exits
//     (fabtests' runs one after another) meets it, and should wait.
//
// So a process claims an interface's queues before binding them: it binds
// an abstract unix socket named after the interface, which the kernel
// releases when the process exits (nothing is left behind, however it
// ends), and which lives in the network namespace, as the interface does.
// A claim held elsewhere is the first case (EBUSY at once); with the claim,
// a busy queue is the second, and Open waits up to ReleaseWait. A process
// that forks passes the claim to its child with the sockets.

// ReleaseWait bounds how long Open waits for the kernel to release a queue
// of an interface whose queues no other xdpfab process claims. Past it (an
// AF_XDP program other than xdpfab holds the queue) Open fails with EBUSY.
const ReleaseWait = 30 * time.Second

// claimQueues claims the queues of interface ifindex of the calling
// thread's network namespace for this process, returning the claim's file
// descriptor (close it to release), or an error matching unix.EBUSY when
// another process holds the claim.
func claimQueues(ifindex int) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("claim queues: %w", err)
	}
	// The leading NUL (Go: '@') puts the name in the abstract namespace.
	name := fmt.Sprintf("@xdpfab/afxdp/%d", ifindex)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return -1, fmt.Errorf("another process holds the AF_XDP queues of interface %d: %w", ifindex, unix.EBUSY)
		}
		return -1, fmt.Errorf("claim queues of interface %d: %w", ifindex, err)
	}
	return fd, nil
}

// openQueue binds an AF_XDP socket with UMEM frames of frameSize bytes to
// queue q of ifindex, whose queues this process has claimed, waiting out a
// release in progress.
func openQueue(ifindex, q int, mode xsk.BindMode, frameSize int) (*xsk.Socket, error) {
	deadline := time.Now().Add(ReleaseWait)
	for {
		s, err := xsk.Open(ifindex, q, xsk.Options{Mode: mode, FrameSize: frameSize})
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
