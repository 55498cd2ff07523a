package testenv

import (
	"fmt"

	"github.com/xdpfab/xdpfab/internal/ethtool"
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
		if err := ethtool.SetTxChecksum(iface, on); err != nil {
			return fmt.Errorf("%w (namespace %s)", err, n.Name)
		}
		return nil
	})
}
