// Package ethtool sets the interface offloads xdpfab's own topologies need,
// through the SIOCETHTOOL ioctl, as `ethtool -K` does, without needing
// ethtool installed.
//
// Transmit checksum offload is the one that matters: on a veth (on by
// default) a kernel socket's datagram crosses with its UDP checksum left
// to offload (CHECKSUM_PARTIAL). The receiving kernel trusts it, but an XDP
// program reading the bytes sees a checksum that does not verify, and
// xdpfab's program passes such a datagram to the stack (pass_bad_csum):
// an AF_XDP endpoint then serves it from its kernel socket, not its rings.
// With the offload off the kernel puts a full checksum in every datagram,
// as a NIC does on the wire.
package ethtool

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolSTXCSUM is ETHTOOL_STXCSUM (linux/ethtool.h).
const ethtoolSTXCSUM = 0x17

// SetTxChecksum turns transmit checksum offload of iface, in the calling
// thread's network namespace, on or off (`ethtool -K iface tx on|off`).
func SetTxChecksum(iface string, on bool) error {
	if len(iface) >= unix.IFNAMSIZ {
		return fmt.Errorf("tx checksum offload: interface name %q too long", iface)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	val := struct{ cmd, data uint32 }{cmd: ethtoolSTXCSUM}
	if on {
		val.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte // the rest of struct ifreq
	}
	copy(ifr.name[:], iface)
	ifr.data = unsafe.Pointer(&val)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("tx checksum offload of %s: %w", iface, errno)
	}
	return nil
}
