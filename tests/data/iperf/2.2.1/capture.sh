#!/bin/sh
# iperf outputs over 127.0.0.1, in the forms nslab parses, into DIR/<iperf version>/
# (no namespaces: loopback only). How 2.2.1/ was made, inside the Debian 13 root:
#   scripts/in-debian13.sh sh tests/data/iperf/2.2.1/capture.sh /tmp/cap
set -u
cd "${1:-.}"
V=$(iperf -v 2>&1 | awk '{print $3}')
mkdir -p "$V"; cd "$V"
P=5811; PU=5812
iperf -s -B 127.0.0.1 -p $P -e > tcp_server_enhanced.txt 2>&1 & S1=$!
iperf -s -B 127.0.0.1 -p $PU -u -e > udp_server_enhanced.txt 2>&1 & S2=$!
sleep 1
iperf -c 127.0.0.1 -p $P -t 2 > tcp_client.txt 2>&1
iperf -c 127.0.0.1 -p $P -t 2 -P 3 > tcp_client_P3.txt 2>&1
iperf -c 127.0.0.1 -p $P -t 2 -e -i 1 > tcp_client_enhanced.txt 2>&1
iperf -c 127.0.0.1 -p $P -t 2 -y C > tcp_client_csv.txt 2>&1
iperf -c 127.0.0.1 -p $P -t 2 -P 3 -y C > tcp_client_P3_csv.txt 2>&1
iperf -c 127.0.0.1 -p $P -t 5 -P 4 -i 1 > tcp_client_P4_i1.txt 2>&1
iperf -c 127.0.0.1 -p $P -t 2 -f k --txstart-time $(( $(date +%s) + 1 )).000000 > tcp_client_kbits.txt 2>&1
iperf -c 127.0.0.1 -p $PU -u -b 50M -t 2 -e -i 1 > udp_client_enhanced.txt 2>&1
iperf -c 127.0.0.1 -p $PU -u -b 50M -t 2 -y C > udp_client_csv.txt 2>&1
sleep 1
kill $S1 $S2; wait
# the study-file receivers: plain servers with -i 1 (TCP with 2 streams: per-interval SUMs; UDP)
iperf -s -B 127.0.0.1 -p $P -i 1 > tcp_server_i1.txt 2>&1 & S1=$!
iperf -s -B 127.0.0.1 -p $PU -u -i 1 > udp_server_i1.txt 2>&1 & S2=$!
sleep 1
iperf -c 127.0.0.1 -p $P -t 3 -P 2 -i 1 > tcp_client_P2_i1.txt 2>&1
iperf -c 127.0.0.1 -p $PU -u -b 20M -t 3 -P 2 -i 1 > udp_client_P2_i1.txt 2>&1
sleep 1
kill $S1 $S2; wait
ls -la
