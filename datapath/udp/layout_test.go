package udp

import (
	"reflect"
	"testing"
)

// TestTransportHotLayout holds the fields a datagram's send and receive
// through the ring sender touch to the Transport's first two cache lines
// (see Transport's Layout): with thousands of endpoints each is a miss.
func TestTransportHotLayout(t *testing.T) {
	tr := reflect.TypeOf(Transport{})
	for _, name := range []string{"fd", "is4", "closed", "errPending", "ringRxHeld", "ringRxRound", "ringRxAgain",
		"batch", "rxMu", "ring", "ringQuiet", "stats"} {
		f, ok := tr.FieldByName(name)
		if !ok {
			t.Errorf("Transport has no field %s", name)
			continue
		}
		if end := f.Offset + f.Type.Size(); end > 2*64 {
			t.Errorf("Transport.%s ends at byte %d, past its first two lines", name, end)
		}
	}
}
