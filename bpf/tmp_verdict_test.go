package bpf

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// MEASUREMENT (issue 11 item 10): the program with and without MR vetting.
func BenchmarkTmpVet(b *testing.B) {
	testenv.RequirePriv(b)
	for _, vet := range []uint32{1, 0} {
		spec, err := LoadXdpfab()
		require.NoError(b, err)
		require.NoError(b, spec.Variables["vet_mr"].Set(vet))
		spec.Maps[XdpfabMapAvMap].MaxEntries = 1024
		spec.Maps[XdpfabMapMrMap].MaxEntries = 1024
		var objs XdpfabObjects
		require.NoError(b, spec.LoadAndAssign(&objs, nil))
		defer objs.Close()
		require.NoError(b, objs.Ports.Put(htons(portBound4), XdpfabPortConfig{AvId: avID, DomainId: domainID,
			Flags: PortStrict | PortBoundAddr, Addr: self4.As16()}))
		require.NoError(b, objs.AvMap.Put(avKey(avID, peer4), XdpfabAvValue{FiAddr: 42}))
		require.NoError(b, objs.MrMap.Put(XdpfabMrKey{DomainId: domainID, Key: keyRW},
			XdpfabMrValue{Base: 0x1000, Len: 0x1000, Access: remoteRead | remoteWrite, RegionId: 9, Flags: 1}))
		for _, bc := range []struct {
			name  string
			frame frame
		}{
			{"msg", udp(peer4, portBound4, request(msgOp(16)))},
			{"rma-write-1op", udp(peer4, portBound4, request(writeOp(keyRW, 0x1000, 64)))},
			{"rma-read-16ops", udp(peer4, portBound4, request(repeat(readOp(keyRW, 0x1000, 8), 16)...))},
			{"rma-read-16ops-distinct", udp(peer4, portBound4, request(distinctReads(16)...))},
		} {
			b.Run(map[uint32]string{1: "vet", 0: "novet"}[vet]+"/"+bc.name, func(b *testing.B) {
				data := bc.frame.build()
				_, per, err := objs.XdpfabXdp.Benchmark(data, b.N, b.ResetTimer)
				require.NoError(b, err)
				b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
			})
		}
	}
}
