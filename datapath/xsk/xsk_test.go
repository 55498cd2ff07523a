package xsk_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/udpframe"
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

const xskPort = 7471

// redirectProgram returns an XDP program that sends IPv4 UDP datagrams
// (without IP options) for port to the XSKMAP slot of the receive queue and
// passes everything else (ARP, other ports) to the stack.
func redirectProgram(t *testing.T, xsks *ebpf.Map, port uint16) *ebpf.Program {
	var be [2]byte
	binary.BigEndian.PutUint16(be[:], port)
	portLE := int32(binary.LittleEndian.Uint16(be[:]))
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 38),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, 0x0008, "pass"), // ethertype 0x0800, read little-endian
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte),
		asm.JNE.Imm(asm.R5, 0x45, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 23, asm.Byte),
		asm.JNE.Imm(asm.R5, 17, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 36, asm.Half),
		asm.JNE.Imm(asm.R5, portLE, "pass"),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // rx_queue_index
		asm.Mov.Imm(asm.R3, 2),                    // fall back to XDP_PASS if no socket
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: insns})
	require.NoError(t, err)
	t.Cleanup(func() { prog.Close() })
	return prog
}

func TestSocketOverVeth(t *testing.T) {
	testenv.RequirePriv(t)
	for _, mode := range []struct {
		name  string
		flags link.XDPAttachFlags
	}{{"native", link.XDPDriverMode}, {"generic", link.XDPGenericMode}} {
		t.Run(mode.name, func(t *testing.T) { testSocketOverVeth(t, mode.flags) })
	}
}

func testSocketOverVeth(t *testing.T, attachFlags link.XDPAttachFlags) {
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})

	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 4})
	require.NoError(t, err)
	t.Cleanup(func() { xsks.Close() })
	prog := redirectProgram(t, xsks, xskPort)

	var sock *xsk.Socket
	require.NoError(t, b.Do(func() error {
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: v.IndexB, Flags: attachFlags})
		if err != nil {
			return fmt.Errorf("attach: %w", err)
		}
		t.Cleanup(func() { l.Close() })
		sock, err = xsk.Open(v.IndexB, 0, xsk.Options{})
		return err
	}))
	t.Cleanup(func() { sock.Close() })
	require.Equal(t, xsk.BindCopy, sock.Mode(), "veth has no zero-copy: auto falls back to copy")
	require.NoError(t, xsks.Put(uint32(0), uint32(sock.FD())))

	// Kernel socket in A sends to B's XDP port; the datagrams land in the XSK.
	var ua *net.UDPConn
	require.NoError(t, a.Do(func() error {
		var err error
		ua, err = net.ListenUDP("udp4", &net.UDPAddr{IP: v.AddrA.Addr().AsSlice(), Port: 9000})
		return err
	}))
	defer ua.Close()
	dst := &net.UDPAddr{IP: v.AddrB.Addr().AsSlice(), Port: xskPort}

	descs := make([]xsk.Desc, 64)
	var got []byte
	var parsed udpframe.Parsed
	deadline := time.Now().Add(5 * time.Second)
	for got == nil && time.Now().Before(deadline) {
		_, err := ua.WriteToUDP([]byte("to the xsk"), dst)
		require.NoError(t, err)
		ready, err := sock.Poll(100)
		require.NoError(t, err)
		if !ready {
			continue
		}
		n := sock.Receive(descs)
		for _, d := range descs[:n] {
			f := sock.Frame(d)
			if udpframe.Parse(f, &parsed) == nil && parsed.Dst.Port() == xskPort {
				got = append([]byte(nil), f[parsed.PayloadOffset:parsed.PayloadOffset+parsed.PayloadLen]...)
			}
		}
		sock.Release(descs[:n])
	}
	require.Equal(t, []byte("to the xsk"), got)
	require.Equal(t, netip.AddrPortFrom(v.AddrA.Addr(), 9000), parsed.Src)

	// The XSK transmits frames it built itself; A's kernel socket receives them.
	var macA, macB net.HardwareAddr
	la, err := a.Netlink().LinkByName(v.NameA)
	require.NoError(t, err)
	macA = la.Attrs().HardwareAddr
	lb, err := b.Netlink().LinkByName(v.NameB)
	require.NoError(t, err)
	macB = lb.Attrs().HardwareAddr
	ep := &udpframe.Endpoints{SrcMAC: macB, DstMAC: macA,
		Src: netip.AddrPortFrom(v.AddrB.Addr(), xskPort), Dst: netip.AddrPortFrom(v.AddrA.Addr(), 9000)}
	const burst = 32
	transmitBurst(t, sock, ep, burst, "from the xsk")

	rbuf := make([]byte, 2048)
	seen := map[string]bool{}
	require.NoError(t, ua.SetReadDeadline(time.Now().Add(5*time.Second)))
	for len(seen) < burst {
		n, from, err := ua.ReadFromUDP(rbuf)
		require.NoError(t, err, "received %d of %d", len(seen), burst)
		require.Equal(t, v.AddrB.Addr().String(), from.IP.String())
		require.True(t, bytes.HasPrefix(rbuf[:n], []byte("from the xsk ")))
		seen[string(rbuf[:n])] = true
	}
	// Every transmitted frame comes back to the free list.
	require.Eventually(t, func() bool { return sock.Reclaim() == 0 }, 2*time.Second, 10*time.Millisecond)
	// Warm TX and RX paths allocate nothing: frames are recycled through
	// the completion and fill rings.
	one := make([]xsk.Desc, 1)
	allocs := testing.AllocsPerRun(200, func() {
		addr, buf, ok := sock.NextTxFrame()
		if !ok {
			return
		}
		n, _ := udpframe.Build(buf, ep, 16)
		one[0] = xsk.Desc{Addr: addr, Len: uint32(n)}
		if sent, _ := sock.Transmit(one); sent == 0 {
			sock.ReturnTxFrame(addr)
		}
		if k := sock.Receive(descs); k > 0 {
			sock.Release(descs[:k])
		}
	})
	require.Zero(t, allocs, "allocations per warm TX+RX round")

	st, err := sock.Stats()
	require.NoError(t, err)
	require.Zero(t, st.Tx_invalid_descs)
	require.Zero(t, st.Rx_invalid_descs)

	testFillGrows(t, sock, ua, dst)
}

// testFillGrows: the fill ring starts with 512 of a default socket's 2,048
// receive frames and takes more when a burst leaves less than half of
// them in it: 400 datagrams received before any is released (the kernel
// took 400 of the 512) all arrive, and releasing them doubles the ring's
// population, once (the next release finds the ring full enough).
func testFillGrows(t *testing.T, sock *xsk.Socket, ua *net.UDPConn, dst *net.UDPAddr) {
	require.Equal(t, 512, sock.FillFrames())
	const flood = 400
	for i := 0; i < flood; i++ {
		_, err := ua.WriteToUDP(fmt.Appendf(nil, "flood %03d", i), dst)
		require.NoError(t, err)
	}
	var held []xsk.Desc
	var parsed udpframe.Parsed
	descs := make([]xsk.Desc, 64)
	seen := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(seen) < flood && time.Now().Before(deadline) {
		_, err := sock.Poll(100)
		require.NoError(t, err)
		n := sock.Receive(descs)
		for _, d := range descs[:n] {
			f := sock.Frame(d)
			if udpframe.Parse(f, &parsed) == nil && bytes.HasPrefix(f[parsed.PayloadOffset:], []byte("flood ")) {
				seen[string(f[parsed.PayloadOffset:parsed.PayloadOffset+parsed.PayloadLen])] = true
			}
		}
		held = append(held, descs[:n]...) // not released yet
	}
	require.Len(t, seen, flood, "datagrams of the burst received")
	require.Equal(t, 512, sock.FillFrames(), "no growth before a release")
	sock.Release(held)
	require.Equal(t, 1024, sock.FillFrames(), "population doubled")
	sock.Release(nil)
	require.Equal(t, 1024, sock.FillFrames(), "and only when the ring runs low")
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := xsk.Open(1, 0, xsk.Options{NumFrames: 100})
	require.Error(t, err)
	_, err = xsk.Open(1, 0, xsk.Options{FrameSize: 1000})
	require.Error(t, err)
}

// TestFrameSizeFor: 2048-byte frames while an MTU's Ethernet frame with a
// VLAN tag fits behind the receive headroom (1774 + 18 = 1792), else 4096.
func TestFrameSizeFor(t *testing.T) {
	for mtu, want := range map[int]int{576: 2048, 1500: 2048, 1774: 2048, 1775: 4096, 3506: 4096, 9000: 4096} {
		if got := xsk.FrameSizeFor(mtu); got != want {
			t.Errorf("xsk.FrameSizeFor(%d) = %d, want %d", mtu, got, want)
		}
	}
}

// transmitBurst builds n UDP frames from ep, payloads prefix and a
// two-digit index, in the socket's free TX frames and transmits them in
// one batch, requiring that every one was taken.
func transmitBurst(t *testing.T, sock *xsk.Socket, ep *udpframe.Endpoints, n int, prefix string) {
	t.Helper()
	out := make([]xsk.Desc, 0, n)
	for i := 0; i < n; i++ {
		addr, buf, ok := sock.NextTxFrame()
		require.True(t, ok)
		payload := fmt.Appendf(nil, "%s %02d", prefix, i)
		copy(buf[ep.HeaderLen():], payload)
		size, err := udpframe.Build(buf, ep, len(payload))
		require.NoError(t, err)
		out = append(out, xsk.Desc{Addr: addr, Len: uint32(size)})
	}
	sent, err := sock.Transmit(out)
	require.NoError(t, err)
	require.Equal(t, n, sent)
}
