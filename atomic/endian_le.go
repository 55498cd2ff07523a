//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package atomic

// nativeLittleEndian says that a word loaded through sync/atomic holds the
// little-endian wire value, so aligned words can be updated lock-free.
const nativeLittleEndian = true
