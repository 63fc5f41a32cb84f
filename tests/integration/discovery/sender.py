"""``python -m tests.integration.discovery.sender ADDRESS``: multicast DNS answers made up by a test, sent raw.

Reads a JSON list on stdin, each item one service instance to claim: ``instance`` (its name under
``_liqo._tcp.local.``), ``txt`` (the TXT record's strings, hex: any bytes, well-formed or not), ``port``,
``ttl``. Everything goes out as unsolicited answers from ADDRESS to 224.0.0.251:5353, as a stranger on the
LAN would send them, with no probing and no cooperation: the listener must cope with whatever comes.
"""

from __future__ import annotations

import json
import socket
import sys

from zeroconf._dns import DNSAddress, DNSPointer, DNSService, DNSText
from zeroconf._protocol.outgoing import DNSOutgoing

FULL_TYPE = "_liqo._tcp.local."
_FLAGS = 0x8400  # a response, authoritative
_A, _PTR, _SRV, _TXT, _IN = 1, 12, 33, 16, 1


def main() -> None:
    address = sys.argv[1]
    claims = json.load(sys.stdin)
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(address))
    out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
    out.bind((address, 0))
    for claim in claims:
        name = f"{claim['instance']}.{FULL_TYPE}"
        server = f"h{abs(hash(name)) % 10**8}.local."
        rdata = b"".join(bytes([len(s)]) + s for s in (bytes.fromhex(h)[:255] for h in claim["txt"]))
        packet = DNSOutgoing(_FLAGS, multicast=True)
        ttl = claim["ttl"]
        packet.add_answer_at_time(DNSPointer(FULL_TYPE, _PTR, _IN, ttl, name), 0)
        packet.add_answer_at_time(DNSService(name, _SRV, _IN, ttl, 0, 0, claim["port"], server), 0)
        packet.add_answer_at_time(DNSText(name, _TXT, _IN, ttl, rdata or b"\x00"), 0)
        packet.add_answer_at_time(DNSAddress(server, _A, _IN, ttl, socket.inet_aton(address)), 0)
        for data in packet.packets():
            out.sendto(data, ("224.0.0.251", 5353))
    out.close()


if __name__ == "__main__":
    main()
