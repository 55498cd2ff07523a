package afxdp

import (
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/xdp"
)

// RingStats is what the kernel counts for one AF_XDP socket of the
// transport's device (getsockopt XDP_STATISTICS): packets it could not
// deliver to the socket's rings, and descriptors it found invalid or
// missing.
type RingStats struct {
	Ifindex int          `json:"ifindex"`
	Netns   xdp.NetnsID  `json:"netns"`
	Queue   int          `json:"queue"`
	Mode    xsk.BindMode `json:"-"`
	Bind    string       `json:"bind"` // "copy" or "zerocopy"

	RxDropped            uint64 `json:"rx_dropped"`               // dropped for other reasons (no room in the frame, ...)
	RxInvalidDescs       uint64 `json:"rx_invalid_descs"`         // invalid descriptors on the fill ring
	TxInvalidDescs       uint64 `json:"tx_invalid_descs"`         // invalid descriptors on the TX ring
	RxRingFull           uint64 `json:"rx_ring_full"`             // dropped: the RX ring was full (user space too slow)
	RxFillRingEmptyDescs uint64 `json:"rx_fill_ring_empty_descs"` // times the fill ring was empty (no frame to receive into)
	TxRingEmptyDescs     uint64 `json:"tx_ring_empty_descs"`      // times the kernel found the TX ring empty after a wakeup
}

// Rings appends the statistics of the AF_XDP sockets the transport's
// device holds on its interface (one per RX queue) to dst. The sockets
// are shared by the process's transports on that interface, so several
// transports report the same ones. It takes none of the datapath's locks;
// a socket closed meanwhile is left out.
func (t *Transport) Rings(dst []RingStats) []RingStats {
	d := t.dev
	p := d.statSocks.Load()
	if p == nil {
		return dst
	}
	for _, s := range *p {
		st, err := s.Stats()
		if err != nil {
			continue
		}
		dst = append(dst, RingStats{Ifindex: d.att.Ifindex, Netns: d.att.Netns, Queue: s.Queue(), Mode: s.Mode(), Bind: s.Mode().String(),
			RxDropped: st.Rx_dropped, RxInvalidDescs: st.Rx_invalid_descs, TxInvalidDescs: st.Tx_invalid_descs,
			RxRingFull: st.Rx_ring_full, RxFillRingEmptyDescs: st.Rx_fill_ring_empty_descs, TxRingEmptyDescs: st.Tx_ring_empty_descs})
	}
	return dst
}

// FrameData is the most bytes of Ethernet frame one of the transport's
// receive frames holds: its device's frame size, chosen by the interface's
// MTU when the first transport on it opened, less the kernel's receive
// headroom (1792 for MTUs up to 1774, else 3840). Packets the endpoint
// builds must fit it (fabric's packet size).
func (t *Transport) FrameData() int { return t.dev.frameSize - xsk.RxHeadroom }

// MaxFrameData is FrameData for the largest frames (4096 bytes).
const MaxFrameData = 4096 - xsk.RxHeadroom

// Iface is the name of the interface the transport's AF_XDP sockets are
// on.
func (t *Transport) Iface() string { return t.dev.att.Iface }
