//go:build amd64 && !race

#include "textflag.h"

// func storeSlot4(s *avt4Slot, odd, mid uint32, lo uint64, even uint32)
TEXT ·storeSlot4(SB), NOSPLIT, $0-28
	MOVQ s+0(FP), AX
	MOVL odd+8(FP), BX
	MOVL mid+12(FP), CX
	MOVQ lo+16(FP), DX
	MOVL even+24(FP), SI
	MOVL BX, 0(AX)
	MOVL CX, 4(AX)
	MOVQ DX, 8(AX)
	MOVL SI, 0(AX)
	RET
