package eq_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
)

// TestAgainstModel drives EQs of several sizes with random operations and
// compares every answer with a plain slice model of fi_eq(3): one FIFO,
// FI_EAVAIL at an error head, overrun at size+1 entries, fatal.
func TestAgainstModel(t *testing.T) {
	type item struct {
		isErr bool
		data  uint64
	}
	for _, size := range []int{1, 2, 3, 5, 64, 65, 200} {
		rng := rand.New(rand.NewPCG(uint64(size), 7))
		q := open(t, eq.Attr{Size: size})
		var model []item
		overrun := false
		var seq uint64
		for step := range 20000 {
			switch op := rng.IntN(10); {
			case op < 4: // post an event or an error
				seq++
				isErr := rng.IntN(4) == 0
				var err error
				if isErr {
					err = q.PostErr(eq.ErrEntry{Err: fi.EIO, Data: seq})
				} else {
					err = q.Post(eq.Entry{Event: eq.Notify, Data: seq})
				}
				if overrun || len(model) == size {
					overrun = true
					require.ErrorIs(t, err, fi.EOVERRUN, "step %d", step)
				} else {
					require.NoError(t, err, "step %d", step)
					model = append(model, item{isErr, seq})
				}
			case op < 8: // Read, with FI_PEEK one time in three
				peek := rng.IntN(3) == 0
				var flags fi.Flags
				if peek {
					flags = fi.PEEK
				}
				e, err := q.Read(flags)
				switch {
				case len(model) == 0 && overrun, len(model) > 0 && model[0].isErr:
					require.ErrorIs(t, err, fi.EAVAIL, "step %d", step)
				case len(model) == 0:
					require.ErrorIs(t, err, fi.EAGAIN, "step %d", step)
				default:
					require.NoError(t, err, "step %d", step)
					require.Equal(t, model[0].data, e.Data, "step %d", step)
					if !peek {
						model = model[1:]
					}
				}
			default: // ReadErr
				ee, err := q.ReadErr(0)
				switch {
				case len(model) == 0 && overrun:
					require.NoError(t, err, "step %d", step)
					require.Equal(t, fi.EOVERRUN, ee.Err)
				case len(model) > 0 && model[0].isErr:
					require.NoError(t, err, "step %d", step)
					require.Equal(t, model[0].data, ee.Data, "step %d", step)
					model = model[1:]
				default:
					require.ErrorIs(t, err, fi.EAGAIN, "step %d", step)
				}
			}
			if overrun && len(model) == 0 && rng.IntN(50) == 0 {
				// Start over: the state is fatal.
				require.NoError(t, q.Close())
				q = open(t, eq.Attr{Size: size})
				overrun = false
			}
		}
	}
}
