package wire

import (
	"bytes"
	"errors"
	"testing"
)

func testHeader(t Type) Header {
	return Header{Type: t, SrcEP: 7, DstEP: 9, AuthKey: 3, Session: 0xdeadbeef,
		Seq: 0xfffffff0, Ack: 0xffffff00, Sack: 0x8000000000000001}
}

// TestRequestRoundTrip encodes every opcode, alone and several per packet,
// and checks Decode returns the same descriptors and payloads.
func TestRequestRoundTrip(t *testing.T) {
	buf := make([]byte, 1500)
	for op := OpMsg; op < opMax; op++ {
		d := OpDesc{Opcode: op, Datatype: 5, AtomicOp: 2, Flags: OpFirst | OpLast | OpFence | OpCQData,
			RespLen: 8, RKey: 0x1122334455667788, Addr: 0x99aabbccddeeff00, Data: 42, Count: 1}
		p1, p2 := []byte("operand!"), []byte{}
		if op == OpCompareAtomic {
			p2 = []byte("compare!")
		}
		if op == OpMsg { // a message has no datatype or response; its flags are MSG flags
			d.Datatype, d.AtomicOp, d.RespLen = uint8(MsgEager), MsgTagged, 0
		}
		var b Builder
		b.Reset(buf, testHeader(TypeReq))
		if err := b.AddOp(d, p1, p2); err != nil {
			t.Fatal(err)
		}
		// A second op packed behind it (FI_MORE).
		d2 := OpDesc{Opcode: OpMsg, Addr: 0, Count: 3}
		if err := b.AddOp(d2, []byte("abc"), nil); err != nil {
			t.Fatal(err)
		}
		pkt := b.Finish()
		if len(pkt) != HeaderLen+2*OpDescLen+len(p1)+len(p2)+3 {
			t.Fatalf("%v: encoded length %d", op, len(pkt))
		}
		var p Packet
		if err := Decode(pkt, &p); err != nil {
			t.Fatalf("%v: decode: %v", op, err)
		}
		h := testHeader(TypeReq)
		h.NumOps = 2
		if p.Header != h {
			t.Fatalf("%v: header %+v want %+v", op, p.Header, h)
		}
		d.Len = uint32(len(p1) + len(p2))
		d.Access = op.Access()
		if p.Ops[0] != d {
			t.Fatalf("%v: desc %+v want %+v", op, p.Ops[0], d)
		}
		if got := p.Payload(0); !bytes.Equal(got, append(append([]byte{}, p1...), p2...)) {
			t.Fatalf("%v: payload %q", op, got)
		}
		if got := p.Payload(1); string(got) != "abc" || p.Ops[1].Opcode != OpMsg {
			t.Fatalf("%v: second op %q %+v", op, got, p.Ops[1])
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	buf := make([]byte, 1500)
	var b Builder
	b.Reset(buf, testHeader(TypeResp))
	dst, err := b.AddResp(RespDesc{Opcode: OpFetchAtomic, Len: 8})
	if err != nil {
		t.Fatal(err)
	}
	copy(dst, "fetched!")
	dst, _ = b.AddResp(RespDesc{Opcode: OpRMARead, Len: 16})
	copy(dst, "readdata")
	b.SetLastResult(8, 0)
	if _, err := b.AddResp(RespDesc{Opcode: OpRMAWrite, Errno: 13}); err != nil {
		t.Fatal(err)
	}
	var p Packet
	if err := Decode(b.Finish(), &p); err != nil {
		t.Fatal(err)
	}
	if p.NumOps != 3 || string(p.Payload(0)) != "fetched!" || string(p.Payload(1)) != "readdata" ||
		p.Resps[2].Errno != 13 || len(p.Payload(2)) != 0 || p.Resps[1].Opcode != OpRMARead {
		t.Fatalf("decoded %+v", p.Resps[:3])
	}
	ack := EncodeAck(buf, testHeader(TypeAck))
	if err := Decode(ack, &p); err != nil || p.Type != TypeAck || p.Sack != testHeader(0).Sack {
		t.Fatalf("ack: %v %+v", err, p.Header)
	}
}

func TestBuilderNoRoom(t *testing.T) {
	buf := make([]byte, HeaderLen+OpDescLen+10)
	var b Builder
	b.Reset(buf, testHeader(TypeReq))
	if err := b.AddOp(OpDesc{Opcode: OpMsg}, make([]byte, 11), nil); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("oversize op: %v", err)
	}
	if err := b.AddOp(OpDesc{Opcode: OpMsg}, make([]byte, 10), nil); err != nil {
		t.Fatal(err)
	}
	if b.Room() >= 0 {
		t.Fatalf("room %d after filling", b.Room())
	}
	big := make([]byte, 65507)
	b.Reset(big, testHeader(TypeReq))
	for i := 0; i < MaxOps; i++ {
		if err := b.AddOp(OpDesc{Opcode: OpAtomic}, []byte{1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddOp(OpDesc{Opcode: OpAtomic}, nil, nil); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("op %d accepted: %v", MaxOps+1, err)
	}
}

// TestDecodeRejects feeds malformed variants of a valid packet.
func TestDecodeRejects(t *testing.T) {
	buf := make([]byte, 1500)
	var b Builder
	b.Reset(buf, testHeader(TypeReq))
	_ = b.AddOp(OpDesc{Opcode: OpRMAWrite, RKey: 1}, []byte("12345678"), nil)
	good := append([]byte{}, b.Finish()...)
	mut := func(f func(p []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	cases := []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"foreign", []byte("GET / HTTP/1.1\r\n"), ErrMagic},
		{"truncated header", good[:HeaderLen-1], ErrShort},
		{"bad version", mut(func(p []byte) []byte { p[1] = 2; return p }), ErrVersion},
		{"bad type", mut(func(p []byte) []byte { p[2] = 9; return p }), ErrType},
		{"zero ops", mut(func(p []byte) []byte { p[4] = 0; return p }), ErrNumOps},
		{"too many ops", mut(func(p []byte) []byte { p[4] = MaxOps + 1; return p }), ErrNumOps},
		{"descs beyond packet", mut(func(p []byte) []byte { p[4] = 2; return p }), ErrLength},
		{"truncated payload", good[:len(good)-1], ErrLength},
		{"trailing bytes", append(append([]byte{}, good...), 0), ErrLength},
		{"op len huge", mut(func(p []byte) []byte { le.PutUint32(p[HeaderLen+8:], 0xffffffff); return p }), ErrLength},
		{"bad opcode", mut(func(p []byte) []byte { p[HeaderLen] = 0x77; return p }), ErrOpcode},
		{"access mismatch", mut(func(p []byte) []byte { p[HeaderLen+1] = AccessRead; return p }), ErrReserved},
		{"reserved flag", mut(func(p []byte) []byte { p[3] = 0x80; return p }), ErrReserved},
		{"answers without a count", mut(func(p []byte) []byte { p[3] |= HdrAnswers; return p }), ErrReserved},
		{"answer count without the flag", mut(func(p []byte) []byte { p[6] = 1; return p }), ErrReserved},
		{"answers on a response", mut(func(p []byte) []byte {
			PutAnswer(p, 1, 2, 1)
			p[2] = uint8(TypeResp)
			return p
		}), ErrReserved},
		{"ack with ops", mut(func(p []byte) []byte { p[2] = uint8(TypeAck); return p }), ErrNumOps},
		{"ack answers without a count", EncodeAck(make([]byte, HeaderLen), Header{Flags: HdrAnswers}), ErrReserved},
		{"ack answer count without the flag", EncodeAck(make([]byte, HeaderLen), Header{Answered: 2}), ErrReserved},
	}
	var p Packet
	for _, c := range cases {
		if err := Decode(c.pkt, &p); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
	if err := Decode(good, &p); err != nil {
		t.Fatalf("good packet: %v", err)
	}
}

// TestAnswerRoundTrip: a request carries answers to its receiver's
// requests (HdrAnswers) through Decode, and ClearAnswer restores the
// request as it was.
func TestAnswerRoundTrip(t *testing.T) {
	buf := make([]byte, 1500)
	var b Builder
	h := testHeader(TypeReq)
	h.Sack = 0
	b.Reset(buf, h)
	_ = b.AddOp(OpDesc{Opcode: OpMsg}, []byte("pong"), nil)
	plain := append([]byte{}, b.Finish()...)
	pkt := append([]byte{}, plain...)
	PutAnswer(pkt, 0xabcdef01, 0xfffffffe, 3)
	var p Packet
	if err := Decode(pkt, &p); err != nil {
		t.Fatal(err)
	}
	if s, last, n := p.Answer(); s != 0xabcdef01 || last != 0xfffffffe || n != 3 {
		t.Fatalf("Answer() = %#x %#x %d", s, last, n)
	}
	if p.Seq != h.Seq || p.Ack != h.Ack || string(p.Payload(0)) != "pong" {
		t.Fatalf("answers changed the request: %+v", p.Header)
	}
	ClearAnswer(pkt)
	if !bytes.Equal(pkt, plain) {
		t.Fatal("ClearAnswer did not restore the request")
	}
	if err := Decode(pkt, &p); err != nil {
		t.Fatal(err)
	}
	if _, _, n := p.Answer(); n != 0 {
		t.Fatalf("a plain request answers %d", n)
	}
}

// TestAnswersAckRoundTrip: an ACK answers a run of its receiver's
// requests (HdrAnswers: session, last, count) beside its receive state,
// through Decode; a plain ACK answers nothing.
func TestAnswersAckRoundTrip(t *testing.T) {
	buf := make([]byte, HeaderLen)
	pkt := EncodeAnswersAck(buf, Header{SrcEP: 7, DstEP: 9, AuthKey: 3}, 0xabcdef01, 0xfffffffe, 0xffffffff, 1<<5, 40)
	var p Packet
	if err := Decode(pkt, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != TypeAck || p.SrcEP != 7 || p.DstEP != 9 || p.AuthKey != 3 || p.Ack != 0xffffffff || p.Sack != 1<<5 {
		t.Fatalf("header %+v", p.Header)
	}
	if s, last, n := p.Answer(); s != 0xabcdef01 || last != 0xfffffffe || n != 40 {
		t.Fatalf("Answer() = %#x %#x %d", s, last, n)
	}
	plain := EncodeAck(make([]byte, HeaderLen), Header{Session: 1, Ack: 2})
	if err := Decode(plain, &p); err != nil {
		t.Fatal(err)
	}
	if _, _, n := p.Answer(); n != 0 {
		t.Fatalf("a plain ack answers %d", n)
	}
}

func TestZeroAlloc(t *testing.T) {
	buf := make([]byte, 1500)
	payload := make([]byte, 1000)
	var p Packet
	var b Builder
	n := testing.AllocsPerRun(100, func() {
		b.Reset(buf, testHeader(TypeReq))
		_ = b.AddOp(OpDesc{Opcode: OpRMAWrite}, payload, nil)
		if err := Decode(b.Finish(), &p); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocs per encode+decode", n)
	}
}

// FuzzDecode: the decoder never panics, and whatever it accepts re-encodes
// to the same bytes (so nothing it accepts is ambiguous).
func FuzzDecode(f *testing.F) {
	buf := make([]byte, 1500)
	var b Builder
	b.Reset(buf, testHeader(TypeReq))
	_ = b.AddOp(OpDesc{Opcode: OpCompareAtomic, Count: 1}, []byte("12345678"), []byte("abcdefgh"))
	_ = b.AddOp(OpDesc{Opcode: OpMsg}, []byte("x"), nil)
	_ = b.AddOp(OpDesc{Opcode: OpMsg, AtomicOp: MsgTagged, RKey: 7, Flags: OpFirst | OpLast, Count: 1}, []byte("y"), nil)
	_ = b.AddOp(OpDesc{Opcode: OpMsg, Datatype: uint8(MsgRTS), Count: RTSLen}, make([]byte, RTSLen), nil)
	f.Add(append([]byte{}, b.Finish()...))
	b.Reset(buf, testHeader(TypeResp))
	d, _ := b.AddResp(RespDesc{Opcode: OpRMARead, Len: 4})
	copy(d, "data")
	f.Add(append([]byte{}, b.Finish()...))
	f.Add(append([]byte{}, EncodeAck(buf, testHeader(TypeAck))...))
	f.Add([]byte{Magic, Version})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Packet
		if err := Decode(data, &p); err != nil {
			return
		}
		out := make([]byte, len(data))
		var b Builder
		b.Reset(out, p.Header)
		for i := 0; i < int(p.NumOps); i++ {
			switch p.Type {
			case TypeReq:
				if err := b.AddOp(p.Ops[i], p.Payload(i), nil); err != nil {
					t.Fatalf("re-encode op %d: %v", i, err)
				}
			case TypeResp:
				dst, err := b.AddResp(p.Resps[i])
				if err != nil {
					t.Fatalf("re-encode resp %d: %v", i, err)
				}
				copy(dst, p.Payload(i))
			}
		}
		if got := b.Finish(); !bytes.Equal(got, data) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", got, data)
		}
	})
}
