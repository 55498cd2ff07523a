package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
)

// Shared target state constants (xdpfab.h).
const (
	KTRing    = 256 // KT_RING: responses the program remembers per peer
	KTDataMax = 128 // KT_DATA_MAX: fetched bytes one XDP-served request may return

	ktCmdClaim   = 1
	ktCmdRelease = 2
	ktCmdFetch   = 3

	ktStOK   = 1
	ktStNone = 2
	ktStBusy = 3
	ktStMiss = 4
)

// KTKey identifies one peer's shared target state (struct kt_key).
type KTKey = XdpfabKtKey

// NewKTKey is the key of the state of peer's endpoint srcEP talking to the
// local UDP port.
func NewKTKey(peer netip.AddrPort, local uint16, srcEP uint32) KTKey {
	return KTKey{Addr: peer.Addr().Unmap().As16(), Sport: be16(peer.Port()), Dport: be16(local), SrcEp: srcEP}
}

func be16(p uint16) uint16 { return p<<8 | p>>8 }

// ErrNoState is returned for a key with no shared state.
var ErrNoState = errors.New("bpf: no shared target state for the peer")

// Claimed is what Claim read from a state it took for user space.
type Claimed struct {
	Session uint32 // the peer's session
	Next    uint32 // next sequence number to deliver
	Served  uint64 // requests the program delivered, ever
	LastNs  uint64 // CLOCK_MONOTONIC ns of the program's last delivery (0 = none)
}

// KTarget is user space's handle on the shared per-peer target state: the
// ktarget map and the kt_control program that takes its spin lock. Safe
// for concurrent use.
type KTarget struct {
	states *ebpf.Map
	ctl    *ebpf.Program
	zero   []byte
}

// NewKTarget loads kt_control against states, the ktarget map of an
// attachment. Close releases the program; states stays the caller's.
func NewKTarget(states *ebpf.Map) (*KTarget, error) {
	cs, err := LoadXdpfab()
	if err != nil {
		return nil, err
	}
	var objs struct {
		Ctl *ebpf.Program `ebpf:"kt_control"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{XdpfabMapKtarget: states}}
	if err := cs.LoadAndAssign(&objs, opts); err != nil {
		return nil, fmt.Errorf("bpf: load kt_control: %w", err)
	}
	return &KTarget{states: states, ctl: objs.Ctl, zero: make([]byte, states.ValueSize())}, nil
}

// Close releases the program.
func (k *KTarget) Close() error { return k.ctl.Close() }

// Create makes a state for key owned by user space, if it has none.
func (k *KTarget) Create(key KTKey) error {
	err := k.states.Update(&key, k.zero, ebpf.UpdateNoExist)
	if errors.Is(err, ebpf.ErrKeyExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bpf: create shared target state: %w", err)
	}
	return nil
}

// Delete removes key's state. Claim it first: a state the program owns
// may be executing.
func (k *KTarget) Delete(key KTKey) error {
	err := k.states.Delete(&key)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bpf: delete shared target state: %w", err)
	}
	return nil
}

const ctlLen = int(unsafe.Sizeof(XdpfabKtCtl{}))

func (k *KTarget) run(c *XdpfabKtCtl) error {
	buf := (*[ctlLen]byte)(unsafe.Pointer(c))[:]
	opts := ebpf.RunOptions{Data: buf, DataOut: buf}
	if _, err := k.ctl.Run(&opts); err != nil {
		return fmt.Errorf("bpf: kt_control: %w", err)
	}
	return nil
}

// claimWait bounds how long Claim waits for the program to finish the
// request it is executing (well under a microsecond in practice).
const claimWait = 100 * time.Millisecond

// Claim takes key's state for user space: from its return until Release
// the program hands every request of the peer up. It reports the session
// and the next sequence number the program reached.
func (k *KTarget) Claim(key KTKey) (Claimed, error) {
	c := XdpfabKtCtl{Key: key, Cmd: ktCmdClaim}
	var deadline time.Time
	for {
		if err := k.run(&c); err != nil {
			return Claimed{}, err
		}
		switch c.Status {
		case ktStOK:
			return Claimed{Session: c.Session, Next: c.Next, Served: c.Served, LastNs: c.LastNs}, nil
		case ktStNone:
			return Claimed{}, ErrNoState
		case ktStBusy:
			if deadline.IsZero() {
				deadline = time.Now().Add(claimWait)
			} else if time.Now().After(deadline) {
				return Claimed{}, errors.New("bpf: shared target state stays busy")
			}
			runtime.Gosched()
			c.Cmd = ktCmdClaim
			continue
		}
		return Claimed{}, fmt.Errorf("bpf: kt_control claim: status %d", c.Status)
	}
}

// Release hands key's state to the program: it delivers the peer's
// requests from next on in session, when they name dstEP.
func (k *KTarget) Release(key KTKey, session, next, dstEP uint32) error {
	c := XdpfabKtCtl{Key: key, Cmd: ktCmdRelease, Session: session, Next: next, DstEp: dstEP}
	if err := k.run(&c); err != nil {
		return err
	}
	switch c.Status {
	case ktStOK:
		return nil
	case ktStNone:
		return ErrNoState
	}
	return fmt.Errorf("bpf: kt_control release: status %d", c.Status)
}

// Fetch copies into dst the values the program fetched for request seq of
// session, which it delivered, and returns how many bytes they are; ok is
// false when the ring no longer (or never) held it.
func (k *KTarget) Fetch(key KTKey, session, seq uint32, dst []byte) (n int, ok bool, err error) {
	c := XdpfabKtCtl{Key: key, Cmd: ktCmdFetch, Session: session, Seq: seq}
	if err := k.run(&c); err != nil {
		return 0, false, err
	}
	switch c.Status {
	case ktStOK:
		if int(c.Dlen) > len(dst) || c.Dlen > KTDataMax {
			return 0, false, fmt.Errorf("bpf: kt_control fetch: %d bytes for a %d-byte buffer", c.Dlen, len(dst))
		}
		return copy(dst, c.Data[:c.Dlen]), true, nil
	case ktStMiss, ktStNone:
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("bpf: kt_control fetch: status %d", c.Status)
}
