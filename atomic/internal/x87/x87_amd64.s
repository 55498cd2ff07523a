#include "textflag.h"

// func Add(a, b, r *[10]byte)
TEXT ·Add(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	MOVQ r+16(FP), CX
	FMOVX (AX), F0
	FMOVX (BX), F0
	FADDDP F0, F1
	FMOVXP F0, (CX)
	RET

// func Mul(a, b, r *[10]byte)
TEXT ·Mul(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	MOVQ r+16(FP), CX
	FMOVX (AX), F0
	FMOVX (BX), F0
	FMULDP F0, F1
	FMOVXP F0, (CX)
	RET

// func ControlWord() uint16
TEXT ·ControlWord(SB), NOSPLIT, $8-2
	FSTCW cw-8(SP)
	MOVW cw-8(SP), AX
	MOVW AX, ret+0(FP)
	RET

// func Compare(a, b *[10]byte) (less, equal, unordered bool)
TEXT ·Compare(SB), NOSPLIT, $0-19
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	FMOVX (BX), F0
	FMOVX (AX), F0
	BYTE $0xDF; BYTE $0xE9 // FUCOMIP ST(0), ST(1): a against b, pop a
	SETCS less+16(FP)
	SETEQ equal+17(FP)
	SETPS unordered+18(FP)
	BYTE $0xDD; BYTE $0xD8 // FSTP ST(0): pop b
	RET
