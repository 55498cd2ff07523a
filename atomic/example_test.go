package atomic_test

import (
	"encoding/binary"
	"fmt"

	"github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fi"
)

// A fetch-and-add of two uint64 counters in a registered region, as the
// target side of fi_fetch_atomic executes it.
func Example() {
	attr, err := atomic.Query(atomic.UINT64, atomic.SUM, fi.FETCH_ATOMIC)
	if err != nil {
		panic(err)
	}
	fmt.Printf("up to %d elements of %d bytes per request\n", attr.Count, attr.Size)

	region := make([]byte, 64) // a registered memory region
	binary.LittleEndian.PutUint64(region[16:], 40)
	operand := binary.LittleEndian.AppendUint64(nil, 2)
	operand = binary.LittleEndian.AppendUint64(operand, 5)
	result := make([]byte, 16)
	if err := atomic.Execute(atomic.Fetch, atomic.UINT64, atomic.SUM, region[16:32], operand, nil, result); err != nil {
		panic(err)
	}
	fmt.Println("fetched", binary.LittleEndian.Uint64(result), binary.LittleEndian.Uint64(result[8:]))
	fmt.Println("now", binary.LittleEndian.Uint64(region[16:]), binary.LittleEndian.Uint64(region[24:]))

	_, err = atomic.CompareValid(atomic.DOUBLE, atomic.MSWAP)
	fmt.Println(err)
	// Output:
	// up to 175 elements of 8 bytes per request
	// fetched 40 0
	// now 42 5
	// atomic: FI_MSWAP on FI_DOUBLE in compare class: operation not supported
}
