package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector is a prometheus.Collector of the reports report returns, one
// per scrape; a report that fails makes the scrape fail with its error.
func Collector(report func() (*Report, error)) prometheus.Collector {
	return &collector{report: report}
}

// Handler serves the calling process's metrics (Local) in Prometheus
// text format, for an application to mount, e.g.
// http.Handle("/metrics", metrics.Handler()).
func Handler() http.Handler {
	return HandlerFor(func() (*Report, error) { return Local(), nil })
}

// HandlerFor serves the reports of report in Prometheus text format (the
// CLI's `xdpfab stats --listen` serves Gather's).
func HandlerFor(report func() (*Report, error)) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(report))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

type collector struct {
	report func() (*Report, error)
}

var (
	xdpLabels  = []string{"iface", "ifindex", "netns"}
	epLabels   = []string{"pid", "comm", "netns", "endpoint", "transport"}
	ringLabels = []string{"pid", "comm", "netns", "ifindex", "queue", "bind"}
)

func desc(name, help string, labels []string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc("xdpfab_"+name, help, append(append([]string{}, labels...), extra...), nil)
}

var (
	descXDP = desc("xdp_packets_total", "Packets the XDP program counted, by outcome (bpf.Counter).", xdpLabels, "counter")

	descOps         = desc("engine_ops_total", "Operations completed, by kind.", epLabels, "op")
	descOpErrors    = desc("engine_op_errors_total", "Operations completed with an error, by kind.", epLabels, "op")
	descTimeouts    = desc("engine_timeouts_total", "Operations failed with FI_ETIMEDOUT (peer unreachable).", epLabels)
	descInFlight    = desc("engine_in_flight_ops", "Operations submitted and not completed.", epLabels)
	descReqPkts     = desc("engine_request_packets_total", "Request packets sent (first transmissions).", epLabels)
	descRetx        = desc("engine_retransmits_total", "Request packets retransmitted (timer or fast).", epLabels)
	descFastRetx    = desc("engine_fast_retransmits_total", "Retransmissions triggered by a gap, not a timer.", epLabels)
	descSpurious    = desc("engine_spurious_retransmits_total", "Retransmitted packets whose first transmission was answered: not needed.", epLabels)
	descPktsPerOp   = desc("engine_packets_per_op", "Request packets sent, retransmissions included, per completed operation, since the endpoint opened.", epLabels)
	descSRTT        = desc("engine_srtt_seconds", "Smoothed round-trip time of the peer sampled last.", epLabels)
	descResponses   = desc("engine_responses_total", "Responses matched to a request in flight.", epLabels)
	descDelivered   = desc("engine_delivered_total", "Request packets executed as target.", epLabels)
	descDups        = desc("engine_duplicates_suppressed_total", "Duplicate request packets kept from executing twice.", epLabels)
	descResets      = desc("engine_session_resets_total", "Sessions a peer restarted.", epLabels)
	descUnreachable = desc("engine_peers_unreachable_total", "Peers declared unreachable after the retry budget.", epLabels)
	descEAgain      = desc("engine_eagain_total", "Submissions refused with FI_EAGAIN.", epLabels)
	descDrops       = desc("engine_drops_total", "Received packets discarded, by reason.", epLabels, "reason")

	descTrRx = desc("transport_rx_packets_total", "Packets the endpoint's transport received, by path (xsk: AF_XDP, kernel: the UDP socket).", epLabels, "path")
	descTrTx = desc("transport_tx_packets_total", "Packets the endpoint's transport sent, by path.", epLabels, "path")

	descRxDropped     = desc("xsk_rx_dropped_total", "AF_XDP socket: packets dropped for other reasons than a full ring (XDP_STATISTICS rx_dropped).", ringLabels)
	descRxInvalid     = desc("xsk_rx_invalid_descs_total", "AF_XDP socket: invalid fill ring descriptors (rx_invalid_descs).", ringLabels)
	descTxInvalid     = desc("xsk_tx_invalid_descs_total", "AF_XDP socket: invalid TX ring descriptors (tx_invalid_descs).", ringLabels)
	descRxRingFull    = desc("xsk_rx_ring_full_total", "AF_XDP socket: packets dropped because the RX ring was full (rx_ring_full).", ringLabels)
	descFillRingEmpty = desc("xsk_rx_fill_ring_empty_descs_total", "AF_XDP socket: times the fill ring was empty (rx_fill_ring_empty_descs).", ringLabels)
	descTxRingEmpty   = desc("xsk_tx_ring_empty_descs_total", "AF_XDP socket: times the TX ring was found empty (tx_ring_empty_descs).", ringLabels)
)

var allDescs = []*prometheus.Desc{descXDP, descOps, descOpErrors, descTimeouts, descInFlight, descReqPkts, descRetx,
	descFastRetx, descSpurious, descPktsPerOp, descSRTT, descResponses, descDelivered, descDups, descResets, descUnreachable,
	descEAgain, descDrops, descTrRx, descTrTx, descRxDropped, descRxInvalid, descTxInvalid, descRxRingFull,
	descFillRingEmpty, descTxRingEmpty}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r, err := c.report()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descXDP, err)
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, x := range r.XDP {
		l := []string{x.Iface, strconv.Itoa(x.Ifindex), x.Netns.String()}
		for _, cn := range x.Counters {
			counter(descXDP, cn.Value, append(l, cn.Name)...)
		}
	}
	for _, p := range r.Processes {
		pid, ns := strconv.Itoa(p.PID), p.Netns.String()
		for _, ep := range p.Endpoints {
			l := []string{pid, p.Comm, ns, ep.Addr, ep.Transport}
			e := &ep.Engine
			for op, v := range e.Ops {
				counter(descOps, v, append(l, op)...)
				counter(descOpErrors, e.OpErrors[op], append(l, op)...)
			}
			counter(descTimeouts, e.Timeouts, l...)
			gauge(descInFlight, float64(e.InFlight), l...)
			counter(descReqPkts, e.RequestPackets, l...)
			counter(descRetx, e.Retransmits, l...)
			counter(descFastRetx, e.FastRetransmits, l...)
			counter(descSpurious, e.SpuriousRetransmits, l...)
			gauge(descPktsPerOp, e.PacketsPerOp, l...)
			gauge(descSRTT, e.SRTTSeconds, l...)
			counter(descResponses, e.Responses, l...)
			counter(descDelivered, e.Delivered, l...)
			counter(descDups, e.DuplicatesSuppressed, l...)
			counter(descResets, e.SessionResets, l...)
			counter(descUnreachable, e.PeersUnreachable, l...)
			counter(descEAgain, e.EAgain, l...)
			for reason, v := range e.Drops {
				counter(descDrops, v, append(l, reason)...)
			}
			switch {
			case ep.AFXDP != nil:
				counter(descTrRx, ep.AFXDP.RxXSK, append(l, "xsk")...)
				counter(descTrRx, ep.AFXDP.RxKernel, append(l, "kernel")...)
				counter(descTrTx, ep.AFXDP.TxXSK, append(l, "xsk")...)
				counter(descTrTx, ep.AFXDP.TxNoHop+ep.AFXDP.TxOtherLink, append(l, "kernel")...)
			case ep.UDP != nil:
				counter(descTrRx, ep.UDP.RxPackets, append(l, "kernel")...)
				counter(descTrTx, ep.UDP.TxPackets, append(l, "kernel")...)
			}
		}
		for _, rs := range p.Rings {
			l := []string{pid, p.Comm, ns, strconv.Itoa(rs.Ifindex), strconv.Itoa(rs.Queue), rs.Bind}
			counter(descRxDropped, rs.RxDropped, l...)
			counter(descRxInvalid, rs.RxInvalidDescs, l...)
			counter(descTxInvalid, rs.TxInvalidDescs, l...)
			counter(descRxRingFull, rs.RxRingFull, l...)
			counter(descFillRingEmpty, rs.RxFillRingEmptyDescs, l...)
			counter(descTxRingEmpty, rs.TxRingEmptyDescs, l...)
		}
	}
}
