package fabric

import (
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// kernelShare is an AF_XDP endpoint's reliable.SharedTarget: the XDP
// program, which serves atomics on the domain's kernel-resident regions
// from the peer's state in the ktarget map (bpf/kserve.h). kt_control is
// loaded at the first release. Receive side only.
type kernelShare struct {
	ep    *Endpoint
	port  uint16 // the endpoint's UDP port
	kt    *bpf.KTarget
	known map[reliable.Peer]bool // states created in ktarget
}

func (s *kernelShare) key(p reliable.Peer) bpf.KTKey { return bpf.NewKTKey(p.Addr, s.port, p.EP) }

// Wants: every op is an atomic on a region the program serves, and no
// counter the program cannot advance is bound for target-side events.
func (s *kernelShare) Wants(pk *wire.Packet) bool {
	ep := s.ep
	if !ep.dom.kmr.serving.Load() || ep.enabledCntr[cntrRemoteWrite] != nil || ep.enabledCntr[cntrRemoteRead] != nil {
		return false
	}
	for i := 0; i < int(pk.NumOps); i++ {
		d := &pk.Ops[i]
		if d.Opcode < wire.OpAtomic || d.Flags&wire.OpCQData != 0 || !ep.dom.kmr.servable(d.RKey) {
			return false
		}
	}
	return true
}

func (s *kernelShare) Release(p reliable.Peer, session, next uint32) error {
	if s.kt == nil {
		kt, err := bpf.NewKTarget(s.ep.dom.kmr.att.KTarget)
		if err != nil {
			return err
		}
		s.kt = kt
	}
	k := s.key(p)
	if !s.known[p] {
		if err := s.kt.Create(k); err != nil {
			return err
		}
		s.known[p] = true
	}
	return s.kt.Release(k, session, next, endpointID)
}

func (s *kernelShare) Claim(p reliable.Peer) (uint32, error) {
	c, err := s.kt.Claim(s.key(p))
	return c.Next, err
}

func (s *kernelShare) Fetched(p reliable.Peer, session, seq uint32, dst []byte) (int, bool) {
	if s.kt == nil {
		return 0, false
	}
	n, ok, err := s.kt.Fetch(s.key(p), session, seq, dst)
	return n, ok && err == nil
}

func (s *kernelShare) Forget(p reliable.Peer) {
	if s.kt == nil || !s.known[p] {
		return
	}
	k := s.key(p)
	_, _ = s.kt.Claim(k)
	_ = s.kt.Delete(k)
	delete(s.known, p)
}

// close releases kt_control, after the engine stopped (and forgot every
// peer).
func (s *kernelShare) close() {
	if s.kt != nil {
		s.kt.Close()
		s.kt = nil
	}
}

// sharedTarget returns the engine's Config.Shared: a kernelShare on an
// AF_XDP transport of a domain that can have kernel-resident regions,
// else nil. Called by Enable.
func (ep *Endpoint) sharedTarget() reliable.SharedTarget {
	if ep.dom.kmr.att == nil || ep.dom.kmr.att.KTarget == nil || ep.dom.kind != TransportXDP {
		return nil
	}
	ep.kshare = &kernelShare{ep: ep, port: ep.tr.LocalAddr().Port(), known: map[reliable.Peer]bool{}}
	return ep.kshare
}
