package fabtests

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// serverReadyTimeout bounds the wait for a fabtests server's port. A
// loaded host took over 10 s once (load average 8, other tests creating
// and destroying namespaces): the failure report says where the server's
// threads were.
const serverReadyTimeout = 30 * time.Second

// awaitServerPort waits until a UDP socket is bound to port in ns (the
// fabtests server opened its endpoint) or a TCP socket listens in ns (the
// server awaits its out-of-band exchange), ctx ends or serverReadyTimeout
// passes, and reports whether the port was seen. A client started
// earlier sends its first message to a closed port: the ICMP refusal
// fails that send, which a test waiting on a counter (fi_poll -t counter,
// fi_rdm_cntr_pingpong) never notices, so both sides would wait forever
// instead of failing; a fixed head start is too short on a loaded host.
func awaitServerPort(ctx context.Context, ns *testenv.Netns, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	deadline := time.Now().Add(serverReadyTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		bound := false
		_ = ns.Do(func() error {
			// thread-self: /proc/net is the netns of the process's
			// main thread, not of this one.
			// The endpoint's UDP port, or any listening TCP socket
			// (state 0A): fabtests' out-of-band exchange (FT_OPT_OOB_*:
			// fi_multi_ep, fi_multi_recv, fi_unexpected_msg) listens on
			// its own port (3000) before the endpoint opens, and the
			// namespace is the test's own.
			for _, f := range []string{"udp", "udp6", "tcp", "tcp6"} {
				b, err := os.ReadFile("/proc/thread-self/net/" + f)
				if err != nil {
					continue
				}
				for _, line := range strings.Split(string(b), "\n")[1:] {
					fields := strings.Fields(line)
					switch {
					case len(fields) < 4:
					case strings.HasPrefix(f, "udp") && strings.HasSuffix(fields[1], want),
						strings.HasPrefix(f, "tcp") && fields[3] == "0A":
						bound = true
					}
				}
			}
			return nil
		})
		if bound {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
