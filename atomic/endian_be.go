//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package atomic

// nativeLittleEndian is false here: every element goes through the striped
// locks, which read and write the little-endian bytes explicitly.
const nativeLittleEndian = false
