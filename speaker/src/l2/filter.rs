//! The classic BPF program attached to the responder's packet sockets, so the kernel hands over
//! only what the responder can answer. Pure: the program is data.
//!
//! Without it a packet socket copies every frame of the interface to user space (all the
//! node's traffic, both directions). With it the kernel passes only:
//! - frames received, not sent by this host (`pkttype != PACKET_OUTGOING`), and
//! - ARP (EtherType 0x0806), or IPv6 whose next header is ICMPv6 (58) and whose ICMPv6 type is
//!   Neighbor Solicitation (135) or Neighbor Advertisement (136: another host announcing an
//!   address this node hands over, see `responder::Responder::hand_over`).
//!
//! Everything else the parser would have dropped as not ours. Malformed ARP and malformed
//! solicitations still pass, so they are still counted per reason.

/// One classic BPF instruction: `(code, jump if true, jump if false, k)`, the layout of
/// `struct sock_filter` (linux/filter.h).
pub type Insn = (u16, u8, u8, u32);

/// `BPF_LD | BPF_W | BPF_ABS`.
pub const LD_W_ABS: u16 = 0x20;
/// `BPF_LD | BPF_H | BPF_ABS`.
pub const LD_H_ABS: u16 = 0x28;
/// `BPF_LD | BPF_B | BPF_ABS`.
pub const LD_B_ABS: u16 = 0x30;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub const JEQ_K: u16 = 0x15;
/// `BPF_RET | BPF_K`.
pub const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: the ancillary load of the packet type.
pub const AD_PKTTYPE: u32 = 0xffff_f000 + 4;
/// `PACKET_OUTGOING`.
pub const PACKET_OUTGOING: u32 = 4;

/// The responder's filter. Jump offsets count from the next instruction.
pub const RESPONDER_FILTER: [Insn; 12] = [
    (LD_W_ABS, 0, 0, AD_PKTTYPE),   // 0: A = pkttype
    (JEQ_K, 9, 0, PACKET_OUTGOING), // 1: outgoing -> drop
    (LD_H_ABS, 0, 0, 12),           // 2: A = EtherType
    (JEQ_K, 6, 0, 0x0806),          // 3: ARP -> accept
    (JEQ_K, 0, 6, 0x86dd),          // 4: not IPv6 -> drop
    (LD_B_ABS, 0, 0, 14 + 6),       // 5: A = IPv6 next header
    (JEQ_K, 0, 4, 58),              // 6: not ICMPv6 -> drop
    (LD_B_ABS, 0, 0, 14 + 40),      // 7: A = ICMPv6 type
    (JEQ_K, 1, 0, 135),             // 8: NS -> accept
    (JEQ_K, 0, 1, 136),             // 9: not NA -> drop
    (RET_K, 0, 0, 0x0004_0000),     // 10: accept (whole frame)
    (RET_K, 0, 0, 0),               // 11: drop
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the subset of classic BPF the filter uses, as the kernel would: out-of-bounds loads
    /// end the program with "drop".
    fn run(prog: &[Insn], frame: &[u8], pkttype: u32) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let (code, jt, jf, k) = prog[pc];
            pc += 1;
            match code {
                LD_W_ABS if k == AD_PKTTYPE => a = pkttype,
                LD_W_ABS | LD_H_ABS | LD_B_ABS => {
                    let size = match code {
                        LD_W_ABS => 4,
                        LD_H_ABS => 2,
                        _ => 1,
                    };
                    let Some(b) = frame.get(k as usize..k as usize + size) else {
                        return 0;
                    };
                    a = b.iter().fold(0, |acc, x| acc << 8 | u32::from(*x));
                }
                JEQ_K => pc += usize::from(if a == k { jt } else { jf }),
                RET_K => return k,
                _ => panic!("opcode {code:#x} not expected in the filter"),
            }
        }
    }

    fn frame(ethertype: u16, next_header: u8, icmp_type: u8) -> Vec<u8> {
        let mut f = vec![0u8; 86];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[20] = next_header;
        f[54] = icmp_type;
        f
    }

    const HOST: u32 = 0;

    #[test]
    fn arp_and_neighbor_solicitations_and_advertisements_pass() {
        assert_ne!(run(&RESPONDER_FILTER, &frame(0x0806, 0, 0), HOST), 0);
        assert_ne!(run(&RESPONDER_FILTER, &frame(0x86dd, 58, 135), HOST), 0);
        assert_ne!(run(&RESPONDER_FILTER, &frame(0x86dd, 58, 136), HOST), 0);
        // A short ARP frame still passes: the parser counts it as truncated.
        assert_ne!(run(&RESPONDER_FILTER, &frame(0x0806, 0, 0)[..20], HOST), 0);
    }

    #[test]
    fn other_traffic_is_left_in_the_kernel() {
        for (et, nh, ty) in [
            (0x0800, 6, 0),
            (0x86dd, 6, 135),
            (0x86dd, 58, 137),
            (0x86dd, 58, 128),
            (0x8100, 0, 0),
        ] {
            assert_eq!(
                run(&RESPONDER_FILTER, &frame(et, nh, ty), HOST),
                0,
                "{et:#x} {nh} {ty}"
            );
        }
    }

    #[test]
    fn frames_this_host_sends_are_not_read_back() {
        assert_eq!(
            run(&RESPONDER_FILTER, &frame(0x0806, 0, 0), PACKET_OUTGOING),
            0
        );
    }

    #[test]
    fn an_ipv6_frame_too_short_for_its_icmp_type_is_dropped_by_the_kernel() {
        assert_eq!(
            run(&RESPONDER_FILTER, &frame(0x86dd, 58, 135)[..40], HOST),
            0
        );
    }
}
