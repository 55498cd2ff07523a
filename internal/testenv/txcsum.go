package testenv

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetTxChecksum turns transmit checksum offload of the interface iface in
// the namespace on or off, as `ethtool -K iface tx on|off` does
// (ETHTOOL_STXCSUM), without needing ethtool installed.
//
// Off, the kernel puts a full UDP checksum in every datagram it sends, as
// a NIC does on the wire. On (veth's default), a kernel socket's datagram
// crosses veth with the checksum left to offload (CHECKSUM_PARTIAL): the
// receiving kernel trusts it, but an XDP program reading the bytes sees a
// checksum that does not verify.
func (n *Netns) SetTxChecksum(iface string, on bool) error {
	return n.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		const ethtoolSTXCSUM = 0x17
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
			return fmt.Errorf("tx checksum offload of %s in %s: %w", iface, n.Name, errno)
		}
		return nil
	})
}
