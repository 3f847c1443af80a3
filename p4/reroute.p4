/*
 * reroute.p4: the P4 program of the reroute service's P4Runtime backend (v1model).
 *
 * One ternary table, MyIngress.reroute, holds the service's flow rules: a rule's match
 * (ingress port, 802.1Q VLAN id, IPv4 addresses, IP protocol, TCP/UDP ports) is the entry's
 * key, its priority the entry's priority, its cookie the entry's controller metadata, and
 * its actions one of forward / push_vlan_forward / pop_vlan_forward / drop. A miss drops.
 *
 * p4/reroute.p4info.txtpb is this program's P4Info, as `p4c --p4runtime-files` writes it
 * (ids from p4c's name hash). To build it for bmv2 (simple_switch_grpc):
 *
 *     p4c --target bmv2 --arch v1model --p4runtime-files build/reroute.p4info.txtpb \
 *         -o build p4/reroute.p4
 *
 * which writes build/reroute.json (the device config that SetForwardingPipelineConfig
 * installs) and a P4Info equal to the one committed here.
 */

#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_VLAN = 0x8100;
const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;

/* ---------------------------------------------------------------------------------- */
/* headers                                                                             */

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header vlan_t {
    bit<3>  pcp;
    bit<1>  dei;
    bit<12> vid;
    bit<16> etherType;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    bit<32> srcAddr;
    bit<32> dstAddr;
}

/* The first four bytes of TCP and UDP: the ports. */
header l4_ports_t {
    bit<16> srcPort;
    bit<16> dstPort;
}

struct headers {
    ethernet_t ethernet;
    vlan_t     vlan;
    ipv4_t     ipv4;
    l4_ports_t l4;
}

struct metadata {
    bit<16> l4_src;
    bit<16> l4_dst;
}

/* ---------------------------------------------------------------------------------- */
/* parser                                                                              */

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {

    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_VLAN: parse_vlan;
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_vlan {
        packet.extract(hdr.vlan);
        transition select(hdr.vlan.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (0, 5, PROTO_TCP): parse_l4;
            (0, 5, PROTO_UDP): parse_l4;
            default: accept;
        }
    }

    state parse_l4 {
        packet.extract(hdr.l4);
        meta.l4_src = hdr.l4.srcPort;
        meta.l4_dst = hdr.l4.dstPort;
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

/* ---------------------------------------------------------------------------------- */
/* ingress: the reroute table                                                          */

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action forward(bit<9> port) {
        standard_metadata.egress_spec = port;
    }

    action push_vlan_forward(bit<12> vid, bit<9> port) {
        hdr.vlan.setValid();
        hdr.vlan.pcp = 0;
        hdr.vlan.dei = 0;
        hdr.vlan.vid = vid;
        hdr.vlan.etherType = hdr.ethernet.etherType;
        hdr.ethernet.etherType = ETHERTYPE_VLAN;
        standard_metadata.egress_spec = port;
    }

    action pop_vlan_forward(bit<9> port) {
        hdr.ethernet.etherType = hdr.vlan.etherType;
        hdr.vlan.setInvalid();
        standard_metadata.egress_spec = port;
    }

    table reroute {
        key = {
            standard_metadata.ingress_port : ternary;
            hdr.vlan.isValid()             : ternary;
            hdr.vlan.vid                   : ternary;
            hdr.ipv4.isValid()             : ternary;
            hdr.ipv4.srcAddr               : ternary;
            hdr.ipv4.dstAddr               : ternary;
            hdr.ipv4.protocol              : ternary;
            meta.l4_src                    : ternary;
            meta.l4_dst                    : ternary;
        }
        actions = {
            forward;
            push_vlan_forward;
            pop_vlan_forward;
            drop;
        }
        const default_action = drop();
        size = 65536;
    }

    apply {
        reroute.apply();
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

/* ---------------------------------------------------------------------------------- */
/* deparser                                                                            */

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.vlan);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.l4);
    }
}

@pkginfo(name="reroute", version="1.0.0")
V1Switch(
    MyParser(),
    MyVerifyChecksum(),
    MyIngress(),
    MyEgress(),
    MyComputeChecksum(),
    MyDeparser()
) main;
