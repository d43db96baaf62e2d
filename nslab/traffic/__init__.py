"""Traffic: what runs in a built lab and what it measures (iperf, pktgen, probes,
samplers, counters, host noise, packet capture, the live watch)."""
