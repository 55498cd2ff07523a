package wire

import (
	"errors"
	"testing"
)

// TestMsgKinds: every message protocol kind round-trips through the
// builder and the decoder, and what decode rejects it rejects as reserved.
func TestMsgKinds(t *testing.T) {
	buf := make([]byte, 1500)
	var rts [RTSLen]byte
	(&RTS{Len: 1 << 30, Handle: 0xfeed_0000_0007}).Put(rts[:])
	var cts [CTSLen]byte
	(&CTS{Handle: 0xfeed_0000_0007, Recv: 9, Accept: 4096}).Put(cts[:])
	ops := []struct {
		d OpDesc
		p []byte
	}{
		{OpDesc{Opcode: OpMsg, Flags: OpFirst | OpLast, Count: 3}, []byte("abc")},
		{OpDesc{Opcode: OpMsg, Flags: OpFirst | OpLast, Count: 3, AtomicOp: MsgTagged, RKey: 0xdead_beef_0000_0001}, []byte("abc")},
		{OpDesc{Opcode: OpMsg, Flags: OpFirst | OpLast | OpCQData, Count: RTSLen, Datatype: uint8(MsgRTS), AtomicOp: MsgTagged,
			RKey: ^uint64(0), Data: 77}, rts[:]},
		{OpDesc{Opcode: OpMsg, Flags: OpFirst | OpLast, Count: RTSLen, Datatype: uint8(MsgRTS)}, rts[:]},
		{OpDesc{Opcode: OpMsg, Flags: OpFirst | OpLast, Count: CTSLen, Datatype: uint8(MsgCTS)}, cts[:]},
		{OpDesc{Opcode: OpMsg, Flags: OpFirst, Count: 1 << 20, Addr: 4096, Datatype: uint8(MsgData),
			RKey: RndvKey(9, 1<<29)}, []byte("data")},
	}
	var b Builder
	b.Reset(buf, testHeader(TypeReq))
	for _, op := range ops {
		if err := b.AddOp(op.d, op.p, nil); err != nil {
			t.Fatal(err)
		}
	}
	var p Packet
	if err := Decode(b.Finish(), &p); err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		got := p.Ops[i]
		want := op.d
		want.Len = uint32(len(op.p))
		if got != want {
			t.Errorf("op %d: got %+v want %+v", i, got, want)
		}
	}
	if p.Ops[1].MsgFlags()&MsgTagged == 0 || p.Ops[2].MsgProto() != MsgRTS || p.Ops[5].MsgProto() != MsgData {
		t.Error("accessors")
	}
	var r RTS
	if err := r.Parse(p.Payload(2)); err != nil || r.Len != 1<<30 || r.Handle != 0xfeed_0000_0007 {
		t.Errorf("RTS %+v %v", r, err)
	}
	var c CTS
	if err := c.Parse(p.Payload(4)); err != nil || c != (CTS{Handle: 0xfeed_0000_0007, Recv: 9, Accept: 4096}) {
		t.Errorf("CTS %+v %v", c, err)
	}
	if rk, base := SplitRndvKey(p.Ops[5].RKey); rk != 9 || base != 1<<29 {
		t.Errorf("rndv key %d %d", rk, base)
	}
	if r.Parse(make([]byte, RTSLen-1)) != ErrLength || c.Parse(make([]byte, CTSLen+1)) != ErrLength {
		t.Error("control payloads of the wrong size accepted")
	}

	bad := []OpDesc{
		{Opcode: OpMsg, Datatype: uint8(msgProtoMax)},                 // unknown protocol
		{Opcode: OpMsg, AtomicOp: 0x80},                               // unknown flag
		{Opcode: OpMsg, Datatype: uint8(MsgCTS), AtomicOp: MsgTagged}, // a CTS is not tagged
		{Opcode: OpMsg, Datatype: uint8(MsgData), AtomicOp: MsgTagged},
		{Opcode: OpMsg, Datatype: uint8(MsgCTS), RKey: 1}, // no key on a CTS
		{Opcode: OpMsg, RespLen: 8},                       // messages want no response data
	}
	for i, d := range bad {
		b.Reset(buf, testHeader(TypeReq))
		if err := b.AddOp(d, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := Decode(b.Finish(), &p); !errors.Is(err, ErrReserved) {
			t.Errorf("bad msg op %d (%+v): %v", i, d, err)
		}
	}
}

// FuzzMsgControl: the RTS and CTS decoders never panic, and what they
// accept re-encodes to the same bytes.
func FuzzMsgControl(f *testing.F) {
	f.Add(make([]byte, RTSLen))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r RTS
		if r.Parse(data) == nil {
			out := make([]byte, RTSLen)
			r.Put(out)
			if string(out) != string(data) {
				t.Fatal("RTS re-encode")
			}
		}
		var c CTS
		if c.Parse(data) == nil {
			out := make([]byte, CTSLen)
			c.Put(out)
			if string(out) != string(data) {
				t.Fatal("CTS re-encode")
			}
		}
	})
}
