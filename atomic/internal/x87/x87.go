//go:build amd64

// Package x87 runs single x87 FPU instructions on 80-bit extended values.
// It exists so that the atomic package's tests can check its software long
// double arithmetic against the hardware; nothing else should need it.
//
// The x87 control word is left as the process has it (on Linux:
// all exceptions masked, 64-bit precision, round to nearest).
package x87

// Add stores a + b, computed by FADDP, in r. Each argument points to the
// 10 bytes of an 80-bit value in memory layout.
//
//go:noescape
func Add(a, b, r *[10]byte)

// Mul stores a * b, computed by FMULP, in r.
//
//go:noescape
func Mul(a, b, r *[10]byte)

// ControlWord returns the x87 control word (FSTCW).
func ControlWord() uint16

// Compare compares a with b by FUCOMIP: less (CF), equal (ZF) and
// unordered (PF) as the CPU reports them. For an unordered pair all three
// are true.
//
//go:noescape
func Compare(a, b *[10]byte) (less, equal, unordered bool)
