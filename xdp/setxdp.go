package xdp

import (
	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink/nl"
)

// IFLA_XDP attributes (linux/if_link.h).
const (
	iflaXDPFD         = 1
	iflaXDPFlags      = 3
	iflaXDPExpectedFD = 8
)

// setXDP attaches program fd to ifindex through netlink, with flags;
// expected, if not negative, is the program that must be attached now
// (XDP_FLAGS_REPLACE): the kernel refuses with EEXIST when another one is,
// which is how libxdp's protocol notices a concurrent change. fd -1
// detaches. vishvananda/netlink has no IFLA_XDP_EXPECTED_FD, hence this.
func setXDP(ifindex, fd, expected int, flags uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(ifindex)
	req.AddData(msg)
	attr := nl.NewRtAttr(unix.IFLA_XDP|unix.NLA_F_NESTED, nil)
	attr.AddRtAttr(iflaXDPFD, nl.Uint32Attr(uint32(int32(fd))))
	if flags != 0 {
		attr.AddRtAttr(iflaXDPFlags, nl.Uint32Attr(flags))
	}
	if expected >= 0 {
		attr.AddRtAttr(iflaXDPExpectedFD, nl.Uint32Attr(uint32(int32(expected))))
	}
	req.AddData(attr)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
