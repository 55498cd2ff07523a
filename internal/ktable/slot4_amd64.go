//go:build amd64 && !race

package ktable

// storeSlot4 writes a compact slot's 16 bytes as the seqlock wants them
// (write4): odd (the odd seq, the port unchanged) in its first word, then
// mid (auth key id, fi_addr's high 16 bits) and lo (the IPv4 address,
// fi_addr's low 32 bits), then even (the even seq and the new port). On
// x86-64 four MOVs in that order, which stores are not reordered with,
// in one call where memorder's release stores took two and the compiler's
// stores between them.
//
//go:noescape
func storeSlot4(s *avt4Slot, odd, mid uint32, lo uint64, even uint32)
